"""One instance of a test or benchmark fleet in an OS process of its own (``python -m tests.support.fleet_instance``;
``--help`` lists every option), which both launch with tests.support.fleet.Launcher: here so that the benches import
the tests' support, never the other way round.

Without ``--jobs`` it runs the fleet tests' one job, ``fleet.tick``, and writes a JSON ledger (tick.py); with ``--jobs
M``, M plain per-second jobs (``--mode apscheduler``: the same on a plain APScheduler, the benchmarks' floor), and
compact lines, cheap enough not to weigh on what the benchmarks measure (jobs.py). Either is built, waits at
``--start-gate`` if given (processes started ahead of time then start together, their imports done), starts, says it
is ready, and shuts down on SIGTERM (__main__.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

WORK_STEP = 0.05  # seconds


class Instance(Protocol):
    """A job set as __main__ runs it: built, then ``waiting`` at the gate, ``start``, ``every`` ``interval`` seconds
    while it runs, ``stop`` (``started`` or not)."""

    interval: float

    def waiting(self) -> None: ...

    def start(self) -> None: ...

    def every(self) -> None: ...

    def stop(self, started: bool) -> None: ...


def work(seconds: float, cancelled: threading.Event) -> bool:
    """``seconds`` of a body's own time, in steps of at most WORK_STEP (a SIGSTOP's time does not count as work: the
    body still has that much to do once continued), or less if ``cancelled`` is set meanwhile; True if it was."""
    remaining = seconds
    while remaining > 0:
        step = min(remaining, WORK_STEP)
        if cancelled.wait(step):
            return True
        remaining -= step
    return False


def setup_django(settings: str | None) -> Callable[[], AbstractContextManager[Any]] | None:
    """Configure Django with ``settings`` first, for the ``django://`` store (the database comes from the settings'
    environment); the fire context that gives each fire fresh connections."""
    if settings is None:
        return None
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    import django

    django.setup()
    from mutexcron_django.per_process import fresh_connections

    return fresh_connections
