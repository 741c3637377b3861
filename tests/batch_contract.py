"""acquire_many() and release_many() in the lock store contract: the answers of acquire() and release(), in order,
each atomic on its own.

The scheduler asks for the locks of every job due at one instant with one acquire_many (one round trip on a
store that batches, such as Redis); each answer must be exactly what acquire() would have said.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron.errors import StoreUnavailable
from mutexcron.stores import AcquireRequest, AcquireStatus, Acquisition, ControlStore, LockStore, ReleaseRequest

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)


def request(name: str, owner: str = "A", fire_time: datetime | None = TICK,
             version: int | None = None) -> AcquireRequest:
    return AcquireRequest(name, owner, LONG, fire_time, version)


def statuses(answers: list[Acquisition | StoreUnavailable]) -> list[AcquireStatus]:
    assert all(isinstance(answer, Acquisition) for answer in answers), answers
    return [answer.status for answer in answers if isinstance(answer, Acquisition)]


class AcquireManyContract:
    """Every store answers acquire_many(); Redis in one round trip (``batches_acquires``). Part of the lock
    contract: a store with the control plane also shows its documents, and PAUSED and STALE_SCHEDULE in a batch
    are in tests/control_contract.py."""

    store: LockStore

    def test_acquire_many_of_nothing_is_nothing(self) -> None:
        assert self.store.acquire_many([]) == []

    def test_acquire_many_answers_each_request_as_acquire_would_in_order(self) -> None:
        self.store.seed(["free", "held", "ran"])
        assert self.store.acquire("held", owner="B", lease=LONG, fire_time=TICK - timedelta(hours=1)).acquired
        ran = self.store.acquire("ran", owner="B", lease=LONG, fire_time=TICK)
        assert ran.token is not None and self.store.release("ran", token=ran.token)

        answers = self.store.acquire_many([request("free"), request("held"), request("ran"),
                                           request("never.seeded")])

        assert statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.BUSY, AcquireStatus.ALREADY_RAN,
                                      AcquireStatus.ACQUIRED]
        free, held, _, new = answers
        assert isinstance(held, Acquisition) and held.holder == "B"
        for name, taken in (("free", free), ("never.seeded", new)):
            assert isinstance(taken, Acquisition) and taken.token is not None
            assert self.store.release(name, token=taken.token)  # the token that holds it

    def test_acquire_many_takes_each_lock_for_its_own_owner_lease_and_fire(self) -> None:
        self.store.seed(["one", "two"])
        later = TICK + timedelta(minutes=1)
        answers = self.store.acquire_many([request("one", owner="X"), request("two", owner="Y", fire_time=later)])
        assert statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.ACQUIRED]
        assert statuses(self.store.acquire_many([request("one", owner="Z"), request("two", owner="Z")])) == [
            AcquireStatus.ALREADY_RAN, AcquireStatus.ALREADY_RAN]  # each took its own fire: TICK, and a later one
        assert self.store.acquire("one", owner="Z", lease=LONG, fire_time=None).holder == "X"
        assert self.store.acquire("two", owner="Z", lease=LONG, fire_time=None).holder == "Y"
        if isinstance(self.store, ControlStore):
            one, two = self.store.lock("one"), self.store.lock("two")
            assert one is not None and one.locked and one.locked_by == "X" and one.last_fire_time == TICK
            assert two is not None and two.locked and two.locked_by == "Y" and two.last_fire_time == later

    def test_a_manual_request_neither_checks_nor_moves_the_last_fire(self) -> None:
        self.store.seed(["job"])
        first = self.store.acquire("job", owner="A", lease=timedelta(seconds=30), fire_time=TICK)
        assert first.acquired and self.store.release("job", token=first.token)  # type: ignore[arg-type]
        (manual,) = self.store.acquire_many([request("job", fire_time=None)])
        assert isinstance(manual, Acquisition) and manual.acquired and manual.token is not None
        if isinstance(self.store, ControlStore):
            assert self.store.lock("job").last_fire_time == TICK  # type: ignore[union-attr]
        assert self.store.release("job", token=manual.token)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=TICK).status is AcquireStatus.ALREADY_RAN

    def test_the_same_fire_twice_in_one_batch_runs_once(self) -> None:
        self.store.seed(["job"])
        answers = self.store.acquire_many([request("job", owner="A"), request("job", owner="B")])
        assert statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.ALREADY_RAN]

    def test_batches_of_many_instances_at_once_give_each_tick_to_one(self) -> None:
        """Eight instances, each asking for the same 20 jobs' tick at once: every job is taken exactly once."""
        names = [f"job.{n}" for n in range(20)]
        self.store.seed(names)
        answers: list[list[Acquisition | StoreUnavailable]] = []
        barrier = threading.Barrier(8)
        lock = threading.Lock()

        def instance(owner: str) -> None:
            barrier.wait()
            got = self.store.acquire_many([request(name, owner=owner) for name in names])
            with lock:
                answers.append(got)

        threads = [threading.Thread(target=instance, args=(f"i{n}",)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(answers) == 8
        taken = Counter(name for got in answers for name, answer in zip(names, got, strict=True)
                        if isinstance(answer, Acquisition) and answer.acquired)
        assert taken == Counter(names)  # each once
        statuses = {answer.status for got in answers for answer in got if isinstance(answer, Acquisition)}
        assert statuses <= {AcquireStatus.ACQUIRED, AcquireStatus.BUSY, AcquireStatus.ALREADY_RAN}


class ReleaseManyContract:
    """Every store answers release_many(); Redis in one round trip (``batches_releases``): the scheduler gives back
    together the locks of bodies that end at once, and each answer must be exactly what release() would have said."""

    store: LockStore

    def test_release_many_of_nothing_is_nothing(self) -> None:
        assert self.store.release_many([]) == []

    def test_release_many_answers_each_request_as_release_would_in_order(self) -> None:
        self.store.seed(["mine", "stale", "other"])
        mine = self.store.acquire("mine", owner="A", lease=LONG, fire_time=TICK)
        stale = self.store.acquire("stale", owner="A", lease=LONG, fire_time=TICK)
        other = self.store.acquire("other", owner="B", lease=LONG, fire_time=TICK)
        assert mine.token is not None and stale.token is not None and other.token is not None

        answers = self.store.release_many([ReleaseRequest("mine", mine.token),
                                           ReleaseRequest("stale", stale.token + 1),
                                           ReleaseRequest("other", other.token, outcome="succeeded")])

        assert answers == [True, False, True]
        later = TICK + timedelta(minutes=1)
        assert self.store.acquire("mine", owner="C", lease=LONG, fire_time=later).acquired  # released
        assert self.store.acquire("stale", owner="C", lease=LONG, fire_time=later).status is AcquireStatus.BUSY
        assert self.store.acquire("other", owner="C", lease=LONG, fire_time=later).acquired

    def test_release_many_keeps_each_outcome_and_hold(self) -> None:
        self.store.seed(["ok", "failed", "held"])
        tokens: dict[str, int] = {}
        for name in ("ok", "failed", "held"):
            token = self.store.acquire(name, owner="A", lease=LONG, fire_time=TICK).token
            assert token is not None
            tokens[name] = token

        answers = self.store.release_many([ReleaseRequest("ok", tokens["ok"], outcome="succeeded"),
                                           ReleaseRequest("failed", tokens["failed"], outcome="failed", error="boom"),
                                           ReleaseRequest("held", tokens["held"], hold_at_least=LONG)])

        assert answers == [True, True, True]
        later = TICK + timedelta(minutes=1)
        assert self.store.acquire("held", owner="C", lease=LONG, fire_time=later).status is AcquireStatus.BUSY
        if isinstance(self.store, ControlStore):
            ok, failed = self.store.lock("ok"), self.store.lock("failed")
            assert ok is not None and ok.last_outcome == "succeeded" and ok.last_success_at is not None
            assert failed is not None and failed.last_outcome == "failed" and failed.last_error == "boom"
            assert not ok.locked and not failed.locked

    def test_release_many_refuses_an_unknown_outcome_before_releasing_anything(self) -> None:
        self.store.seed(["job"])
        taken = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        assert taken.token is not None
        with pytest.raises(ValueError, match="exploded"):
            self.store.release_many([ReleaseRequest("job", taken.token),
                                     ReleaseRequest("job", taken.token, outcome="exploded")])
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=None).status is AcquireStatus.BUSY
