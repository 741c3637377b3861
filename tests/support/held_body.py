"""The body of the ``run_on="tasks"`` fleet tests' job: it reports its start and end, and one run of it (the first
to start once the test drops a hold marker) blocks until its worker is killed, so that the test can SIGKILL a
worker in the middle of a body and watch the task run again; or, with the stall marker, blocks until it learns that
its worker lost the run (``ctx.lock_lost``, once the test stopped and resumed the worker), and then gives up, as a
body that honours ``lock_lost`` does."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutexcron.records import JobContext

HOLD_MARKER = "hold-next-body"  # created by the test; the first body to rename it away holds
STALL_MARKER = "stall-next-body"  # likewise, for a body that holds until its lock is lost
LOST_WAIT = 60.0  # seconds a stalled body waits to learn that its lock was lost (the test's own bound is shorter)


def take_hold(directory: Path, marker: str = HOLD_MARKER) -> bool:
    """True for the one body that takes ``marker`` (a rename: exactly one wins, across processes)."""
    try:
        os.rename(directory / marker, directory / f"{marker}-taken-by-{os.getpid()}")
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
    if take_hold(directory, STALL_MARKER):
        write("holding", **tick)
        deadline = time.monotonic() + LOST_WAIT
        while not ctx.lock_lost and time.monotonic() < deadline:  # the worker is stopped and resumed meanwhile
            time.sleep(0.02)
        write("abandoned", lock_lost=ctx.lock_lost, **tick)
        return
    write("body", **tick)
