"""A plain-Python task worker in the main thread, as a script would run one (tests/tasks/test_foreground_worker.py).

    python tests/tasks/foreground_worker.py URL LEDGER

Logs at INFO to stderr, registers a handler for "foreground.task" and calls ``queue.run_worker()``, nothing more:
no signal handler of its own. The handler appends "started <n>" to LEDGER, waits until the file ``LEDGER.go``
exists, then appends "finished <n>".
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from mutexcron.tasks import HandlerRegistry, TaskQueue, task_handler

TASK_TYPE = "foreground.task"


def main(url: str, ledger: Path) -> int:
    # Ctrl-C as in a terminal: a process started in the background of a non-interactive shell (CI runs the suites
    # so) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler of its own.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
    handlers = HandlerRegistry()

    @task_handler(TASK_TYPE, registry=handlers)
    def run(payload: Any) -> None:
        with ledger.open("a") as out:
            out.write(f"started {payload}\n")
        go = ledger.with_name(ledger.name + ".go")
        deadline = time.monotonic() + 30
        while not go.exists() and time.monotonic() < deadline:  # released by the test
            time.sleep(0.02)
        with ledger.open("a") as out:
            out.write(f"finished {payload}\n")

    queue = TaskQueue(url, handlers=handlers, worker_id="foreground")
    queue.run_worker()
    queue.close()
    print("run_worker returned", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
