"""gunicorn hooks. None is needed: every worker starts its scheduler when it boots, with or without ``--preload``
(:mod:`mutexcron_django.autostart`). ``post_worker_init`` is kept for configurations that name it."""

from __future__ import annotations

from typing import Any


def post_worker_init(worker: Any) -> None:
    """Start the worker's scheduler if it is not running yet (idempotent: autostart has started it already)."""
    from .autostart import start

    start()
