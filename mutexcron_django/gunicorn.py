"""gunicorn hooks: in gunicorn.conf.py, ``from mutexcron_django.gunicorn import post_worker_init``."""

from __future__ import annotations

from typing import Any


def post_worker_init(worker: Any) -> None:
    """Start the worker's scheduler as soon as it has loaded the app (after the fork, never in the master)."""
    from .autostart import start

    start()
