"""One task worker, run as its own OS process by tests/tasks/test_task_workers.py.

    python tests/tasks/task_worker.py --url URL --worker NAME --ledger PATH
        [--cancel-store URL] [--visibility-timeout SECONDS] [--prefetch N] [--task-seconds SECONDS]

Registers one handler, for the task type "workers.task", runs ``TaskQueue.start()`` on it and appends one
JSON line per event to its own ledger (opened with O_APPEND; each line is one write() and fsync'ed, so no
line is lost, split or merged, and no two processes share a file):

    {"event": "ready", "pid": ...}            the worker thread is running
    {"event": "ran", "n": ..., "attempt_started_at": ...}
                                              written by the handler (payload ``{"n": …}``) before it returns
    {"event": "holding", "n": ...}            payload ``{"n": …, "hang": true}``: the first run of it in the
                                              whole fleet (a marker file next to the ledger) never returns
    {"event": "dying", "n": ...}              payload ``{"n": …, "die": true}``: the handler SIGKILLs its process
    {"event": "cpu", "user": ..., "system": ...}
                                              on SIGUSR1: this process's CPU seconds so far (os.times())
    {"event": "died", "error": ...}           the worker thread died (the process exits 1)
    {"event": "stopped"}                      after a clean shutdown on SIGTERM

Every line carries "worker" and "at" (this process's wall clock, time.time()).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from mutexcron.tasks import HandlerRegistry, TaskQueue, task_handler
from tests.support import Ledger

TASK_TYPE = "workers.task"
HANG_MARKER = "hang.marker"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="task backend URL")
    parser.add_argument("--cancel-store", default=None, help="cancel store URL (backends that need one)")
    parser.add_argument("--worker", required=True, help="this worker's name")
    parser.add_argument("--ledger", required=True, type=Path, help="this worker's own JSON-lines ledger")
    parser.add_argument("--visibility-timeout", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--prefetch", type=int, default=10)
    parser.add_argument("--task-seconds", type=float, default=0.0, help="how long each task runs (default 0)")
    parser.add_argument("--max-attempts", type=int, default=5)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s {args.worker} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    if args.url.startswith("django:"):
        import django

        django.setup()
    ledger = Ledger(args.ledger, time.time, worker=args.worker)
    marker = args.ledger.parent / HANG_MARKER
    hanging = threading.Event()

    def first_hang_in_fleet() -> bool:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False
        return True

    handlers = HandlerRegistry()

    @task_handler(TASK_TYPE, registry=handlers, visibility_timeout=timedelta(seconds=args.visibility_timeout),
                  backoff=timedelta(milliseconds=100), max_attempts=args.max_attempts)
    def run(payload: dict[str, Any]) -> None:
        started = time.time()
        if payload.get("die"):  # a task that kills whichever worker runs it
            ledger.write("dying", n=payload["n"])
            os.kill(os.getpid(), signal.SIGKILL)
        if payload.get("hang") and first_hang_in_fleet():
            ledger.write("holding", n=payload["n"])
            hanging.set()
            threading.Event().wait()  # until this process is killed; the heartbeat keeps the claim alive
        if args.task_seconds:
            time.sleep(args.task_seconds)
        ledger.write("ran", n=payload["n"], started_at=started)

    # A signal handler must not take a lock the main thread may hold (an Event's would deadlock it): it
    # writes a byte to a pipe that the main loop selects on.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    flags = {"stop": False, "cpu": False}

    def on_signal(name: str) -> Any:
        def handler(signum: int, frame: object) -> None:
            flags[name] = True
            with contextlib.suppress(BlockingIOError):  # a full pipe: the main loop is already due to wake
                os.write(wake_write, b"!")

        return handler

    signal.signal(signal.SIGTERM, on_signal("stop"))
    signal.signal(signal.SIGINT, on_signal("stop"))
    signal.signal(signal.SIGUSR1, on_signal("cpu"))

    options = {"cancel_store": args.cancel_store} if args.cancel_store else {}
    queue = TaskQueue(args.url, handlers=handlers, worker_id=args.worker, **options)
    queue.start(prefetch=args.prefetch)
    ledger.write("ready", pid=os.getpid())
    while not flags["stop"]:
        if select.select([wake_read], [], [], 1.0)[0]:  # bounded, to notice a dead worker thread too
            os.read(wake_read, 1024)
        if not queue.worker_alive and not hanging.is_set():
            ledger.write("died", error=repr(queue.worker_error))
            return 1  # a worker thread that died must not look like a clean stop
        if flags["cpu"]:
            flags["cpu"] = False
            times = os.times()
            ledger.write("cpu", user=times.user, system=times.system)
    if hanging.is_set():
        ledger.write("stopped")
        os._exit(0)  # the hung handler would keep stop() waiting
    queue.close()
    ledger.write("stopped")
    ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
