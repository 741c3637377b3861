"""SignalFlag: the stop flag that signal handlers set in the foreground commands and test processes, where a
threading.Event could deadlock the main thread it interrupts."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from mutexcron._signals import SignalFlag

LOOPING_PROCESS = """
import signal, sys
from mutexcron._signals import SignalFlag
flag = SignalFlag()
signal.signal(signal.SIGTERM, lambda signum, frame: flag.set())
print("ready", flush=True)
while not flag.wait(0.0001):  # a busy waiting loop: a signal lands at any point of wait()
    pass
print("stopped", flush=True)
"""


def test_wait_returns_false_after_its_timeout_and_true_once_set() -> None:
    flag = SignalFlag()
    started = time.monotonic()
    assert flag.wait(0.05) is False and time.monotonic() - started >= 0.04
    flag.set()
    assert flag.is_set() and flag.wait(5) is True and flag.wait() is True


def test_a_set_from_another_thread_wakes_every_waiter() -> None:
    flag = SignalFlag()
    woken: list[bool] = []
    waiters = [threading.Thread(target=lambda: woken.append(flag.wait(10))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    flag.set()
    for waiter in waiters:
        waiter.join(5)
    assert woken == [True, True, True]


def test_a_signal_that_lands_anywhere_in_a_waiting_loop_stops_it() -> None:
    for _ in range(20):
        process = subprocess.Popen([sys.executable, "-c", LOOPING_PROCESS], stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        process.terminate()
        try:
            out, _ = process.communicate(timeout=10)
        finally:
            process.kill()
        assert process.returncode == 0 and out.strip() == "stopped"
