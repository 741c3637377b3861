"""acquire_many() in the lock store contract: the answers of acquire(), in order, each atomic on its own.

The scheduler asks for the locks of every job due at one instant with one acquire_many (one round trip on a
store that batches, such as Redis); each answer must be exactly what acquire() would have said.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

from mutexcron.errors import StoreUnavailable
from mutexcron.stores import AcquireRequest, AcquireStatus, Acquisition, LockStore

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)


def _request(name: str, owner: str = "A", fire_time: datetime | None = TICK,
             version: int | None = None) -> AcquireRequest:
    return AcquireRequest(name, owner, LONG, fire_time, version)


def _statuses(answers: list[Acquisition | StoreUnavailable]) -> list[AcquireStatus]:
    assert all(isinstance(answer, Acquisition) for answer in answers), answers
    return [answer.status for answer in answers if isinstance(answer, Acquisition)]


class AcquireManyContract:
    """Every store answers acquire_many(); Redis in one round trip (``batches_acquires``)."""

    store: LockStore

    def test_acquire_many_of_nothing_is_nothing(self) -> None:
        assert self.store.acquire_many([]) == []

    def test_acquire_many_answers_each_request_as_acquire_would_in_order(self) -> None:
        self.store.seed(["free", "held", "ran", "paused", "retimed"])
        assert self.store.acquire("held", owner="B", lease=LONG, fire_time=TICK - timedelta(hours=1)).acquired
        assert self.store.acquire("ran", owner="B", lease=timedelta(seconds=30), fire_time=TICK).acquired
        assert self.store.release("ran", token=self.store.lock("ran").token)  # type: ignore[union-attr]
        self.store.pause("paused")
        version = self.store.set_schedule("retimed", "*/5 * * * *")
        assert version is not None

        answers = self.store.acquire_many([
            _request("free"), _request("held"), _request("ran"), _request("paused"),
            _request("retimed", version=version.schedule_version - 1), _request("never.seeded"),
        ])

        assert _statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.BUSY, AcquireStatus.ALREADY_RAN,
                                      AcquireStatus.PAUSED, AcquireStatus.STALE_SCHEDULE, AcquireStatus.ACQUIRED]
        free, held, _, _, retimed, new = answers
        assert isinstance(free, Acquisition) and free.token == self.store.lock("free").token  # type: ignore[union-attr]
        assert isinstance(held, Acquisition) and held.holder == "B"
        assert isinstance(retimed, Acquisition) and retimed.schedule_version == version.schedule_version
        assert isinstance(new, Acquisition) and self.store.lock("never.seeded") is not None

    def test_acquire_many_takes_each_lock_for_its_own_owner_lease_and_fire(self) -> None:
        self.store.seed(["one", "two"])
        later = TICK + timedelta(minutes=1)
        answers = self.store.acquire_many([_request("one", owner="X"), _request("two", owner="Y", fire_time=later)])
        assert _statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.ACQUIRED]
        one, two = self.store.lock("one"), self.store.lock("two")
        assert one is not None and one.locked and one.locked_by == "X" and one.last_fire_time == TICK
        assert two is not None and two.locked and two.locked_by == "Y" and two.last_fire_time == later

    def test_a_manual_request_neither_checks_nor_moves_the_last_fire(self) -> None:
        self.store.seed(["job"])
        first = self.store.acquire("job", owner="A", lease=timedelta(seconds=30), fire_time=TICK)
        assert first.acquired and self.store.release("job", token=first.token)  # type: ignore[arg-type]
        (manual,) = self.store.acquire_many([_request("job", fire_time=None)])
        assert isinstance(manual, Acquisition) and manual.acquired
        assert self.store.lock("job").last_fire_time == TICK  # type: ignore[union-attr]

    def test_the_same_fire_twice_in_one_batch_runs_once(self) -> None:
        self.store.seed(["job"])
        answers = self.store.acquire_many([_request("job", owner="A"), _request("job", owner="B")])
        assert _statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.ALREADY_RAN]

    def test_batches_of_many_instances_at_once_give_each_tick_to_one(self) -> None:
        """Eight instances, each asking for the same 20 jobs' tick at once: every job is taken exactly once."""
        names = [f"job.{n}" for n in range(20)]
        self.store.seed(names)
        answers: list[list[Acquisition | StoreUnavailable]] = []
        barrier = threading.Barrier(8)
        lock = threading.Lock()

        def instance(owner: str) -> None:
            barrier.wait()
            got = self.store.acquire_many([_request(name, owner=owner) for name in names])
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
