"""The job of the fleet test site with FLEET_RUN_ON_TASKS=1: every second, ``run_on="tasks"``.

Its body runs in ``manage.py mutexcron worker`` processes and appends to ``$FLEET_LEDGER_DIR/body-<pid>.jsonl``
(a ledger per process, tests.support.Ledger): ``started``, then ``body`` once it completed, or ``holding`` for the
one run that takes the test's hold marker and blocks until its worker is killed (tests.support.held_body).
"""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mutexcron import JobContext, mutex_cron
from tests.support import Ledger
from tests.support.held_body import run_held_body

JOB_NAME = "fleet_django.offloaded"
_lock = threading.Lock()
_ledgers: dict[int, Ledger] = {}  # pid -> its ledger, so a forked child never writes its parent's file


def write(event: str, **fields: Any) -> None:
    directory = Path(os.environ["FLEET_LEDGER_DIR"])
    pid = os.getpid()
    with _lock:
        ledger = _ledgers.get(pid)
        if ledger is None:
            ledger = _ledgers[pid] = Ledger(directory / f"body-{pid}.jsonl", lambda: datetime.now(UTC).isoformat(),
                                            pid=str(pid))
    ledger.write(event, **fields)


@mutex_cron("* * * * * *", name=JOB_NAME, lease=timedelta(seconds=10), run_on="tasks")
def offloaded(ctx: JobContext) -> None:
    run_held_body(ctx, Path(os.environ["FLEET_LEDGER_DIR"]), write)
