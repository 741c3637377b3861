"""One start-to-shutdown span of a scheduler: its fires in flight, its running bodies, its threads, and the
shutdown gate that closes once, so that no body starts after shutdown began and every thread is stopped."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..records import JobContext
from ..running.heartbeats import Heartbeats
from ..running.pings import Pings

if TYPE_CHECKING:
    from .schedules import ScheduleSync

__all__ = ["SHUTDOWN_GRACE", "Generation", "WorkerPool"]

logger = logging.getLogger("mutexcron.scheduler")

# How long shutdown may take beyond its timeout: to stop the heartbeat thread, close the store and join
# the worker threads. Each is bounded by it; a thread stuck in a store call past it is left (daemon).
SHUTDOWN_GRACE = 1.0


class WorkerPool:
    """Up to ``max_workers`` daemon threads that run submitted calls in order.

    Daemon threads, unlike concurrent.futures' workers (which the interpreter joins at exit): a store
    call that hangs past the shutdown deadline must not keep the process from exiting.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        self._max_workers = max_workers
        self._name = name
        self._calls: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._busy: set[threading.Thread] = set()  # threads inside a call
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, call: Callable[[], object]) -> bool:
        """Queue ``call``; False (and dropped) once the pool is closed."""
        with self._lock:
            if self._closed:
                return False
            self._calls.put(call)
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        return True

    def close(self) -> None:
        """Drop the calls not started yet; every thread ends once its current call returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            while True:
                try:
                    self._calls.get_nowait()
                except queue.Empty:
                    break
            for _ in self._threads:
                self._calls.put(None)

    def join(self, deadline: float, *, busy_too: bool = True) -> bool:
        """Wait until ``deadline`` (time.monotonic()) for the threads (without ``busy_too``: those not inside
        a call, which may be stuck in a store call) to end; True if all of them did."""
        with self._lock:
            threads = [thread for thread in self._threads if thread is not threading.current_thread()
                       and (busy_too or thread not in self._busy)]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _work(self) -> None:
        me = threading.current_thread()
        while (call := self._calls.get()) is not None:
            with self._lock:
                self._busy.add(me)
            try:
                call()
            except Exception:
                logger.exception("mutexcron: a fire failed in its worker thread")
            with self._lock:
                self._busy.discard(me)
            self._idle.release()


class Generation:
    """What one start() of a scheduler (or its life before the first start) owns, and its shutdown.

    Every fire ``enter()``s before it acquires and ``leave()``s after its listeners ran; ``close()`` stops
    new fires from entering. A won lock becomes a body only through ``admit()``, which admits while
    shutdown still waits for the fires in flight (a tick already being acquired is run, not lost) and
    refuses once it stopped waiting: the caller then releases the lock without running the body.
    ``finish()`` waits for the fires in flight with a deadline, then stops the heartbeat thread, closes
    the store and joins the worker threads, each bounded by :data:`SHUTDOWN_GRACE`. A generation is never
    reopened; start() after a shutdown makes a new one, so a fire left over from the old one cannot restart
    its threads.
    """

    def __init__(self, heartbeats: Heartbeats, close_store: Callable[[], None] | None, pings: Pings) -> None:
        self.heartbeats = heartbeats
        self.pool: WorkerPool | None = None
        self.sync: ScheduleSync | None = None  # reads the store's schedules; stopped with the heartbeats
        self.pings = pings  # the jobs' ping_url GETs; its threads start with the first ping
        self.closing = threading.Event()  # set once shutdown began; also wakes fires waiting for a busy lock
        self._close_store = close_store
        self._changed = threading.Condition()
        self._in_flight = 0
        self._running: dict[int, JobContext] = {}
        self._detached = False  # shutdown(wait=False) returned first: the last fire to leave finishes up
        self._admitting = True  # until shutdown stops waiting for the fires in flight
        self._finalized = False

    def start_pool(self, max_workers: int) -> WorkerPool:
        self.pool = WorkerPool(max_workers, "mutexcron-job")
        return self.pool

    @property
    def finalized(self) -> bool:
        """True once shutdown began finishing up (stopping the heartbeats, closing the store): from then on
        no store call may start, so a body that ends later leaves its lock to its lease."""
        return self._finalized

    def running_names(self) -> list[str]:
        with self._changed:
            return sorted({ctx.job_name for ctx in self._running.values()})

    def enter(self) -> bool:
        """A fire begins; False once shutdown began (the fire must not even acquire)."""
        with self._changed:
            if self.closing.is_set():
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._changed:
            self._in_flight -= 1
            self._changed.notify_all()
            last = self._detached and self._in_flight == 0 and self._claim()
        if last:
            self._finalize(time.monotonic() + SHUTDOWN_GRACE)

    def admit(self, ctx: JobContext) -> bool:
        """Register a body that won its lock; False once shutdown stopped waiting for the fires in flight
        (or returned at once, without ``wait``): release the lock, do not run."""
        with self._changed:
            if not self._admitting:
                return False
            self._running[id(ctx)] = ctx
            return True

    def done(self, ctx: JobContext) -> None:
        with self._changed:
            self._running.pop(id(ctx), None)

    def close(self) -> None:
        """From now on no fire enters and no body is admitted; fires not started yet are dropped."""
        with self._changed:
            self.closing.set()
        if self.sync is not None:
            self.sync.wake()  # it sees closing and ends
        if self.pool is not None:
            self.pool.close()

    def finish(self, *, wait: bool, timeout: float) -> bool:
        """Close, then with ``wait`` wait up to ``timeout`` seconds for the fires in flight and finish up;
        without ``wait`` finish up now if none is in flight, else when the last one leaves. True if none was
        in flight when it returned."""
        self.close()
        with self._changed:
            if wait:
                self._changed.wait_for(lambda: self._in_flight == 0, timeout)
            self._admitting = False
            idle = self._in_flight == 0
            self._detached = not wait
            claimed = (wait or idle) and self._claim()
            running, in_store = sorted({c.job_name for c in self._running.values()}), self._in_flight
        if not idle and wait:
            logger.warning("shutdown: %d fire(s) still in flight after %.1fs, job(s) %s still running; their "
                           "locks expire with their lease", in_store, timeout, running)
        if claimed:
            self._finalize(time.monotonic() + SHUTDOWN_GRACE, join=True, busy_too=idle)
        return idle

    def _claim(self) -> bool:
        """Under the lock: True for the one caller that finalizes."""
        if self._finalized:
            return False
        self._finalized = True
        return True

    def _finalize(self, deadline: float, join: bool = False, busy_too: bool = True) -> None:
        if not self.heartbeats.stop(max(0.0, deadline - time.monotonic())):
            logger.warning("shutdown: the heartbeat thread is stuck in a store call; left behind")
        if self.sync is not None and not self.sync.stop(max(0.0, deadline - time.monotonic())):
            logger.warning("shutdown: the schedule sync thread is stuck in a store call; left behind")
        if self.pool is not None:
            self.pool.close()
        if not self.pings.stop(deadline):
            logger.warning("shutdown: a ping is still resolving its host's name; left to a daemon thread")
        if self._close_store is not None:
            closer = threading.Thread(target=self._close_store, name="mutexcron-close-store", daemon=True)
            closer.start()
            closer.join(max(0.0, deadline - time.monotonic()))
            if closer.is_alive():
                logger.warning("shutdown: closing the lock store hangs; left to a daemon thread")
        if join and self.pool is not None and not self.pool.join(deadline, busy_too=busy_too):
            logger.info("shutdown: worker thread(s) still in a body or a store call are left behind (daemon)")
