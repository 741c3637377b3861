"""The job of the fleet test site, found by mutexcron_django's autodiscovery (``<app>.cron``).

Its body appends one JSON line per run to ``$FLEET_LEDGER_DIR/body-<pid>.jsonl``: a file per process
(opened after any fork, with O_APPEND; each line is one write() and is fsync'ed), so no run is lost and
a tick run twice shows as two lines, whichever processes ran it.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mutexcron import JobContext, mutex_cron

JOB_NAME = "fleet_django.tick"
_lock = threading.Lock()
_ledgers: dict[int, int] = {}  # pid -> fd, so a forked child never writes its parent's file


def append(entry: dict[str, object]) -> None:
    directory = os.environ.get("FLEET_LEDGER_DIR")
    if not directory:
        return
    pid = os.getpid()
    line = (json.dumps({**entry, "pid": pid, "at": datetime.now(UTC).isoformat()}) + "\n").encode()
    with _lock:
        fd = _ledgers.get(pid)
        if fd is None:
            path = Path(directory) / f"body-{pid}.jsonl"
            fd = _ledgers[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        written = os.write(fd, line)
        assert written == len(line), f"short write to the ledger: {written} of {len(line)} bytes"
        os.fsync(fd)


@mutex_cron("* * * * * *", name=JOB_NAME, lease=timedelta(seconds=10))
def tick(ctx: JobContext) -> None:
    append({"fire_time": ctx.fire_time.isoformat(), "instance": ctx.instance_id, "token": ctx.token})
