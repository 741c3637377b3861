"""Ctrl-C on a worker that runs in the main thread (``queue.run_worker()`` in a plain script): a clean stop after
the task it is running, with one log line, instead of a KeyboardInterrupt traceback from wherever it was."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .._signals import SignalFlag

__all__ = ["CtrlC", "stop_on_ctrl_c"]

logger = logging.getLogger("mutexcron.tasks")


class CtrlC:
    """Whether Ctrl-C was pressed while :func:`stop_on_ctrl_c`'s block ran."""

    pressed = False


@contextmanager
def stop_on_ctrl_c(worker_id: str, stop: Callable[[], None]) -> Iterator[CtrlC]:
    """While the block runs in the main thread under Python's default SIGINT handler, the first Ctrl-C calls
    ``stop()`` (from a thread of its own: a signal handler must take no lock the main thread may hold) and a
    second one raises KeyboardInterrupt. In another thread, or under a SIGINT handler of the application's own
    (left alone), nothing is installed."""
    ctrl_c = CtrlC()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield ctrl_c
        return
    pressed = SignalFlag()
    guard = threading.Lock()
    leaving = False

    def on_sigint(signum: int, frame: object) -> None:
        if ctrl_c.pressed:
            raise KeyboardInterrupt  # a second Ctrl-C: leave without waiting for the running task
        ctrl_c.pressed = True
        pressed.set()

    def watch() -> None:
        pressed.wait()
        with guard:
            if leaving:  # the block ended first: nothing left to stop
                return
            logger.warning("task worker %s: Ctrl-C received; stopping after the task it is running (Ctrl-C "
                           "again to leave at once: that task then runs again after its visibility timeout)",
                           worker_id)
            stop()

    previous = signal.signal(signal.SIGINT, on_sigint)
    watcher = threading.Thread(target=watch, name="mutexcron-task-worker-ctrl-c", daemon=True)
    watcher.start()
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, previous)
        with guard:
            leaving = True
        pressed.set()  # releases the watcher, which now stops nothing
        watcher.join()
        pressed.close()
