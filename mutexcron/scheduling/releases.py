"""Locks of bodies that end at once, given back together: on a store that batches releases
(``LockStore.batches_releases``), the worker threads that release at the same moment share one ``release_many``.

The first thread to release sends its own release and every other queued by then; the threads that queue while
it waits for the store wait for its answer instead of sending their own, and one of them sends the next batch.
Every thread still returns only once its own lock is released, so a body's record and listeners come after its
release as before; what changes is that the bodies of one tick won together cost a few round trips instead of
one each, and the threads do not queue for the interpreter lock after a round trip each.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..stores import LockStore, ReleaseRequest
from ..stores.base import check_outcome

__all__ = ["Releases"]


def _held() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Queued:
    """One thread's release, until it has its answer (or is asked to send the next batch). Its thread waits on a
    lock held from the start, which the sender releases: a lock costs a thread hand-off less than an Event."""

    request: ReleaseRequest
    answer: bool | BaseException | None = None  # None: not sent yet
    _woken: threading.Lock = field(default_factory=_held)

    def wait(self) -> None:
        """Until answered, or asked to send the next batch (then the answer is still None)."""
        self._woken.acquire()

    def wake(self) -> None:
        self._woken.release()

    def settle(self, answer: bool | BaseException) -> None:
        """Its answer, once: its thread was the sender (which holds the lock again) or waits for it."""
        self.answer = answer
        self._woken.release()

    def result(self) -> bool:
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert self.answer is not None
        return self.answer


class Releases:
    """:meth:`release`, as ``store.release`` does, but sent with the releases of other threads queued at once."""

    def __init__(self, store: LockStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._queue: list[_Queued] = []
        self._sending = False  # a thread is sending a batch: the others queue behind it

    def release(self, request: ReleaseRequest) -> bool:
        """``store.release`` of ``request``: True if its token held the lock; raises StoreUnavailable (a store
        outage is each queued release's answer)."""
        if not self._store.batches_releases:
            return self._store.release(request.name, token=request.token, hold_at_least=request.hold_at_least,
                                       outcome=request.outcome, error=request.error)
        check_outcome(request.outcome, request.error)  # a bad outcome is its caller's error, not its batch's
        mine = _Queued(request)
        with self._lock:
            self._queue.append(mine)
            first = not self._sending
            self._sending = True
        if not first:
            mine.wait()  # answered, or asked to send the next batch (the sender then still owes the answer)
        if mine.answer is None:
            self._send()
        return mine.result()

    def waiting(self) -> int:
        """How many releases are queued for the next batch (while one is being sent)."""
        with self._lock:
            return len(self._queue)

    def _send(self) -> None:
        """Send every queued release in one ``release_many``, answer each, then hand the sending on to the first
        thread queued meanwhile (or stop sending)."""
        with self._lock:
            batch, self._queue = self._queue, []
        answers: list[bool | BaseException]
        try:
            answers = list(self._store.release_many([queued.request for queued in batch]))
            if len(answers) != len(batch):  # a store breaking its contract must not leave a thread waiting forever
                raise RuntimeError(f"{self._store!r}: release_many answered {len(answers)} of {len(batch)} releases")
        except BaseException as error:  # not a store outage (those are answers): each thread raises it
            answers = [error] * len(batch)
        for queued, answer in zip(batch, answers, strict=True):
            queued.settle(answer)
        with self._lock:
            following = self._queue[0] if self._queue else None
            self._sending = following is not None
        if following is not None:
            following.wake()  # it finds no answer yet: it sends the next batch
