"""Start one scheduler in each process that serves requests, and in no other process.

- ``manage.py runserver``: in the process that serves (the autoreloader's child, or the only process
  with ``--noreload``), at start-up; the autoreloader's parent only watches files and runs none.
- Other servers (gunicorn, uWSGI, Daphne, Uvicorn, Hypercorn, Waitress, mod_wsgi): at the first
  request a process serves, so never in a pre-forking master (gunicorn ``--preload``, uWSGI), always
  after the fork. For an eager start, call :func:`start` from the server's post-fork hook
  (gunicorn: ``post_worker_init = mutexcron_django.gunicorn.post_worker_init``).
- Any other process (``migrate``, ``shell``, ``test``, pytest, Celery, scripts): none, unless it calls
  :func:`mutexcron_django.runtime.start` or runs ``manage.py mutexcron run``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from django.apps import apps
from django.core.signals import request_started

from . import runtime

logger = logging.getLogger("mutexcron.django")

SERVERS = ("gunicorn", "uwsgi", "daphne", "uvicorn", "hypercorn", "waitress", "mod_wsgi")


def serving_process_kind(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> str | None:
    """What kind of serving process this is: ``"runserver"``, ``"server"`` (start at first request) or None."""
    argv = sys.argv if argv is None else argv
    environ = dict(os.environ) if environ is None else environ
    program = os.path.basename(argv[0]) if argv else ""
    if program == "__main__.py":  # python -m <package>: argv[0] is <package>/__main__.py
        package = os.path.basename(os.path.dirname(argv[0]))
        if any(package.startswith(server) for server in SERVERS):
            program = package
    if program in ("manage.py", "django-admin", "django-admin.py", "__main__.py") or program.endswith("manage.py"):
        if len(argv) > 1 and argv[1] == "runserver":
            serving = "--noreload" in argv or environ.get("RUN_MAIN") == "true"
            return "runserver" if serving else None
        return None
    if any(program.startswith(server) for server in SERVERS) or "uwsgi" in sys.modules or "mod_wsgi" in sys.modules:
        return "server"
    return None


def start() -> None:
    """Start this process's scheduler now (idempotent); for servers' post-fork hooks."""
    runtime.start()


def _start_on_first_request(**_: Any) -> None:
    if runtime.get_scheduler().running:
        return
    runtime.start()


def _start_when_apps_are_ready() -> None:
    # Starting seeds the lock rows: a query, which Django discourages inside AppConfig.ready().
    apps.ready_event.wait()
    runtime.start()


def install() -> str | None:
    """Called from AppConfig.ready() when AUTOSTART is on."""
    kind = serving_process_kind()
    if kind == "runserver":
        threading.Thread(target=_start_when_apps_are_ready, name="mutexcron-autostart", daemon=True).start()
    elif kind == "server":
        request_started.connect(_start_on_first_request, dispatch_uid="mutexcron-autostart")
    logger.debug("mutexcron autostart: process %d is %s", os.getpid(), kind or "not a serving process")
    return kind
