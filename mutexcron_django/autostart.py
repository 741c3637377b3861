"""Start one scheduler in each process that serves requests, as soon as it boots (no request needed, no hook to
add), and in no other process.

- ``manage.py runserver``: in the process that serves (the autoreloader's child, or the only process with
  ``--noreload``); the autoreloader's parent only watches files and runs none.
- gunicorn, uWSGI, Daphne, Uvicorn, Hypercorn, Waitress, mod_wsgi: in each process that loads the app (a
  gunicorn or uWSGI worker; each of Uvicorn's ``--workers``, which import the app themselves), once the apps
  are ready. A master that loads the app before it forks its workers (gunicorn ``--preload``, uWSGI without
  ``--lazy-apps``) runs none: each worker starts its own right after the fork (:mod:`.prefork`).
- Any other process (``migrate``, ``shell``, ``test``, pytest, Celery, scripts): none, unless it calls
  :func:`mutexcron_django.runtime.start` or runs ``manage.py mutexcron run``.

A serving process without a scheduler says why in a WARNING: at boot if ``AUTOSTART`` is off, if its start
failed, or if it has none :data:`BOOT_GRACE` seconds after boot; at its first request if it is a server that
this module does not know (a ``manage.py`` command that serves, an unknown program).
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
from .prefork import master_kind, run_in_each_worker

logger = logging.getLogger("mutexcron.django")

SERVERS = ("gunicorn", "uwsgi", "daphne", "uvicorn", "hypercorn", "waitress", "mod_wsgi")
TEST_RUNNERS = ("pytest", "py.test")
BOOT_GRACE = 5.0  # seconds after boot: a serving process that runs no scheduler by then logs a warning
_UNKNOWN_SERVER = "mutexcron-unknown-server"


def serving_process_kind(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> str | None:
    """What kind of serving process this is: ``"runserver"``, ``"server"`` or None (serves no request)."""
    argv = sys.argv if argv is None else argv
    environ = dict(os.environ) if environ is None else environ
    program = _program(argv)
    if program in ("manage.py", "django-admin", "django-admin.py", "__main__.py") or program.endswith("manage.py"):
        if len(argv) > 1 and argv[1] == "runserver":
            serving = "--noreload" in argv or environ.get("RUN_MAIN") == "true"
            return "runserver" if serving else None
        return None
    if any(program.startswith(server) for server in SERVERS) or "uwsgi" in sys.modules or "mod_wsgi" in sys.modules:
        return "server"
    return None


def _program(argv: list[str]) -> str:
    """The program's name: ``argv[0]``'s, or the package's for ``python -m <package>`` (argv[0] is its
    ``__main__.py``; ``python -m django`` stays ``__main__.py``, as ``manage.py``)."""
    program = os.path.basename(argv[0]) if argv else ""
    if program == "__main__.py":
        package = os.path.basename(os.path.dirname(argv[0]))
        if any(package.startswith(name) for name in (*SERVERS, *TEST_RUNNERS)):
            return package
    return program


def start() -> None:
    """Start this process's scheduler now (idempotent): for code of a server's own that wants it started."""
    runtime.start()


def install(autostart: bool = True) -> str | None:
    """Called from AppConfig.ready(): plan this process's scheduler (``autostart``: ``MUTEXCRON["AUTOSTART"]``)."""
    kind = serving_process_kind()
    logger.debug("mutexcron autostart: process %d is %s", os.getpid(), kind or "not a serving process")
    if kind is None:
        if autostart and not _testing():
            request_started.connect(_warn_unknown_server, dispatch_uid=_UNKNOWN_SERVER)
        return None
    master = master_kind()
    if master is not None:
        logger.debug("mutexcron autostart: process %d is a pre-forking %s master: each worker starts its own "
                     "scheduler after the fork, this process none", os.getpid(), master)
        run_in_each_worker(master, lambda: boot(autostart))
    else:
        boot(autostart)
    return kind


def boot(autostart: bool) -> None:
    """In a serving process that has just booted: start its scheduler in a thread once the apps are ready (the
    start seeds lock rows: a query, which Django discourages inside ``AppConfig.ready()``), or say why not."""
    if not autostart:
        logger.warning("mutexcron: MUTEXCRON['AUTOSTART'] is off, so serving process %d runs no scheduler and no "
                       "job runs in it; run `manage.py mutexcron run` in a process of its own (or turn AUTOSTART "
                       "on)", os.getpid())
        return
    _warn_if_uwsgi_runs_no_threads()
    booted = threading.Event()  # set once the start ended, well or not
    threading.Thread(target=_start_when_apps_are_ready, args=(booted,), name="mutexcron-autostart",
                     daemon=True).start()
    threading.Thread(target=_watch_boot, args=(booted,), name="mutexcron-autostart-watch", daemon=True).start()


def _start_when_apps_are_ready(booted: threading.Event) -> None:
    try:
        apps.ready_event.wait()
        runtime.start()
    except Exception as error:
        logger.warning("mutexcron: the scheduler of serving process %d did not start, so no job runs in it: %s",
                       os.getpid(), error, exc_info=True)
    finally:
        booted.set()


def _watch_boot(booted: threading.Event) -> None:
    """A start that has not ended BOOT_GRACE seconds after boot is said once (it goes on: it may still come)."""
    if booted.wait(BOOT_GRACE):
        return
    waiting_for = "the apps to be ready" if not apps.ready_event.is_set() else "its start to return"
    logger.warning("mutexcron: serving process %d has no scheduler %.0f s after boot: still waiting for %s",
                   os.getpid(), BOOT_GRACE, waiting_for)


def _warn_if_uwsgi_runs_no_threads() -> None:
    uwsgi: Any = sys.modules.get("uwsgi")
    if uwsgi is not None and not (uwsgi.opt.get("enable-threads") or uwsgi.opt.get("threads")):
        logger.warning("mutexcron: uWSGI runs without --enable-threads: the scheduler of process %d is a thread, "
                       "which then runs only while a request is served; add --enable-threads", os.getpid())


def _testing() -> bool:
    """pytest or ``manage.py test``: requests come from a test client or a live server, never from users."""
    program = _program(sys.argv)
    return program in TEST_RUNNERS or (program.endswith("manage.py") and sys.argv[1:2] == ["test"])


def _warn_unknown_server(sender: Any, **_: Any) -> None:
    """At the first request of a process that autostart does not take for a server: it runs no scheduler."""
    if getattr(sender, "__module__", "").startswith("django.test"):
        return  # Django's test client, in a script or a shell
    request_started.disconnect(dispatch_uid=_UNKNOWN_SERVER)
    if runtime.running_scheduler() is not None:
        return  # started by the application itself
    logger.warning(
        "mutexcron: process %d serves requests but runs no scheduler: %r is not a server that AUTOSTART knows "
        "(manage.py runserver, %s), so none was started; call mutexcron_django.runtime.start() when this server "
        "has booted, or run `manage.py mutexcron run` in a process of its own", os.getpid(),
        " ".join(sys.argv[:2]) or "this program", ", ".join(SERVERS))
