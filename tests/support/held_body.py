"""The body of the ``run_on="tasks"`` fleet tests' job: it reports its start and end, and one run of it (the first
to start once the test drops a hold marker) blocks until its worker is killed, so that the test can SIGKILL a
worker in the middle of a body and watch the task run again."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutexcron.records import JobContext

HOLD_MARKER = "hold-next-body"  # created by the test; the first body to rename it away holds


def take_hold(directory: Path) -> bool:
    """True for the one body that takes the hold marker (a rename: exactly one wins, across processes)."""
    try:
        os.rename(directory / HOLD_MARKER, directory / f"held-by-{os.getpid()}")
    except FileNotFoundError:
        return False
    return True


def run_held_body(ctx: JobContext, directory: Path, write: Callable[..., Any]) -> None:
    """Write ``started``; then either ``holding`` and block for good, or ``body`` (the run completed)."""
    tick = {"fire_time": ctx.fire_time.isoformat(), "token": ctx.token, "catch_up": ctx.catch_up}
    write("started", **tick)
    if take_hold(directory):
        write("holding", **tick)
        threading.Event().wait()  # until SIGKILL
    write("body", **tick)
