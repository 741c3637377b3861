"""Flask: the :class:`MutexCron` extension (a scheduler per serving process, from ``app.config``) and the
``health/`` and ``metrics/`` :data:`blueprint`. Needs ``mutexcron[flask]``.

    app.config["MUTEXCRON_STORE"] = "redis://127.0.0.1:6379/0"
    mutexcron = MutexCron(app)  # or MutexCron(), then mutexcron.init_app(app) in the app factory
    app.register_blueprint(blueprint, url_prefix="/mutexcron")
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Any

try:
    from flask import Blueprint, Flask, Response, current_app, request
except ImportError as missing:  # pragma: no cover - exercised in a process without Flask
    raise ImportError(f"mutexcron.contrib.flask needs Flask: pip install 'mutexcron[flask]' ({missing})") from missing

from ..scheduling.scheduler import Scheduler
from . import endpoints
from .config import AppSettings, read_config, start_mode

__all__ = ["EXTENSION", "MutexCron", "blueprint", "post_worker_init"]

logger = logging.getLogger("mutexcron.contrib")
EXTENSION = "mutexcron"  # the key of app.extensions

_apps: weakref.WeakSet[_AppScheduler] = weakref.WeakSet()  # every app's scheduler holder of this process


class _AppScheduler:
    """One app's scheduler in each process: built again in a forked child (threads do not survive a fork),
    started once, shut down at interpreter exit."""

    def __init__(self, settings: AppSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._scheduler = settings.build_scheduler()  # a bad store URL fails at init_app, not at a request
        self._pid = os.getpid()
        self._exit_hook = False

    def scheduler(self) -> Scheduler:
        with self._lock:
            return self._here()

    def _here(self) -> Scheduler:
        if self._pid != os.getpid():  # a forked child: the parent's scheduler is not ours to start or stop
            self._scheduler, self._pid, self._exit_hook = self.settings.build_scheduler(), os.getpid(), False
        return self._scheduler

    def start(self) -> Scheduler:
        """Start this process's scheduler unless it runs (idempotent, thread-safe)."""
        with self._lock:
            scheduler = self._here()
            if not scheduler.running:
                scheduler.start()
                logger.info("mutexcron scheduler started in process %d", os.getpid())
            if not self._exit_hook:
                atexit.register(self.stop)
                self._exit_hook = True
            return scheduler

    def start_on_request(self) -> None:
        if self._pid != os.getpid() or not self._scheduler.running:
            self.start()

    def stop(self) -> None:
        """Shut this process's scheduler down, waiting (bounded) for running bodies."""
        with self._lock:
            if self._pid == os.getpid() and self._scheduler.running:
                self._scheduler.shutdown(wait=True)


class MutexCron:
    """The Flask extension: reads the ``MUTEXCRON_*`` keys of ``app.config`` at :meth:`init_app` and runs a
    scheduler in each process that serves the app: at once in the Werkzeug reloader's child, at the first
    request elsewhere (never in the reloader's parent or a pre-forking master); with gunicorn, eagerly after
    each fork through :func:`post_worker_init`. ``MUTEXCRON_AUTOSTART = False`` leaves it to :meth:`start`."""

    def __init__(self, app: Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        holder = _AppScheduler(read_config(app.config))
        app.extensions[EXTENSION] = holder
        _apps.add(holder)
        if not holder.settings.autostart:
            return
        if start_mode(os.environ) == "now":
            holder.start()
        else:
            app.before_request(holder.start_on_request)

    def scheduler(self, app: Flask | None = None) -> Scheduler:
        """This process's scheduler of ``app`` (default: the current app)."""
        return _holder(app).scheduler()

    def start(self, app: Flask | None = None) -> Scheduler:
        """Start this process's scheduler of ``app`` now (idempotent); it shuts down at interpreter exit."""
        return _holder(app).start()

    def stop(self, app: Flask | None = None) -> None:
        """Shut this process's scheduler of ``app`` down, waiting (bounded) for running bodies."""
        _holder(app).stop()


def _holder(app: Flask | None) -> _AppScheduler:
    holder: _AppScheduler | None = (app or current_app).extensions.get(EXTENSION)
    if holder is None:
        raise RuntimeError("mutexcron is not set up on this app: call MutexCron(app) or init_app(app) first")
    return holder


def post_worker_init(worker: Any) -> None:
    """gunicorn hook (``from mutexcron.contrib.flask import post_worker_init`` in gunicorn.conf.py): start the
    worker's schedulers as soon as it has loaded the app, after the fork, never in the master."""
    for holder in list(_apps):
        if holder.settings.autostart:
            holder.start()


blueprint = Blueprint("mutexcron", __name__)


@blueprint.route("/health/", methods=["GET", "HEAD"])
def health() -> Response:
    """200 or 503 with the fleet's health; job names and errors only for ``Authorization: Bearer
    <MUTEXCRON_HEALTH_TOKEN>``."""
    holder: _AppScheduler | None = current_app.extensions.get(EXTENSION)
    if holder is None:
        return _response(endpoints.unavailable("health", "MutexCron(app) was not set up on this app"))
    detail = endpoints.may_see_details(request.headers.get("Authorization"), holder.settings.health_token)
    return _response(endpoints.health(holder.scheduler(), detail=detail))


@blueprint.route("/metrics/", methods=["GET"])
def metrics() -> Response:
    """The Prometheus exposition while ``MUTEXCRON_METRICS`` is True (404 otherwise)."""
    holder: _AppScheduler | None = current_app.extensions.get(EXTENSION)
    if holder is None:
        return _response(endpoints.unavailable("metrics", "MutexCron(app) was not set up on this app"))
    return _response(endpoints.metrics(holder.settings.metrics, request.headers.get("Accept", ""),
                                       how_to_enable='set app.config["MUTEXCRON_METRICS"] = True'))


def _response(answer: endpoints.Answer) -> Response:
    return Response(answer.body, status=answer.status, content_type=answer.content_type,
                    headers={"Cache-Control": "no-store"})
