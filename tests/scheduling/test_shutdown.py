"""Scheduler.shutdown(): it returns in time whatever is in flight, and after it no body starts, every lock
it won is released and no mutexcron thread is left (issue 7, item 6). Against real stores, wrapped."""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron import JobContext, Registry, Scheduler, mutex_cron
from mutexcron.running.heartbeats import Heartbeats
from mutexcron.scheduling.lifecycle import SHUTDOWN_GRACE
from mutexcron.stores import Acquisition, ControlStore, LockState, LockStore, MemoryLockStore, store_from_url
from tests.support import wait_until

TICK = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)
HELD_FOR = 30.0  # a held store call gives up after this long, so that a failing test ends


class Hold:
    """Makes the calls of one store method wait at their start until ``go`` is set."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()


class SlowStore(LockStore, ControlStore):
    """A real store whose ``acquire`` is slower (as a loaded store's is) and whose calls can be held.

    Every call's start is noted with time.monotonic(), so a test can tell whether any came after shutdown.
    """

    def __init__(self, inner: LockStore, acquire_latency: tuple[float, float] = (0.0, 0.0)) -> None:
        assert isinstance(inner, ControlStore)
        self.inner: Any = inner  # a LockStore and a ControlStore
        self.acquire_latency = acquire_latency
        self.calls: list[tuple[str, str, float]] = []  # (method, job name, monotonic start)
        self.acquiring = 0
        self.holds: dict[str, Hold] = {}
        self._random = random.Random()
        self._lock = threading.Lock()

    def hold(self, method: str) -> Hold:
        self.holds[method] = hold = Hold()
        return hold

    def _enter(self, method: str, name: str) -> None:
        with self._lock:
            self.calls.append((method, name, time.monotonic()))
        hold = self.holds.get(method)
        if hold is not None:
            hold.entered.set()
            hold.go.wait(HELD_FOR)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        self._enter("acquire", name)
        with self._lock:
            self.acquiring += 1
            latency = self._random.uniform(*self.acquire_latency)
        try:
            time.sleep(latency)  # the store's own slowness (a test input, not a synchronisation)
            return self.inner.acquire(name, owner=owner, lease=lease, fire_time=fire_time,
                                      schedule_version=schedule_version)
        finally:
            with self._lock:
                self.acquiring -= 1

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        self._enter("renew", name)
        return self.inner.renew(name, token=token, lease=lease)

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        self._enter("release", name)
        return self.inner.release(name, token=token, hold_at_least=hold_at_least, outcome=outcome, error=error)

    def seed(self, names: Iterable[str]) -> int:
        return self.inner.seed(names)

    def read(self, name: str) -> LockState | None:
        return self.inner.read(name)

    def locks(self) -> list[LockState]:
        return self.inner.locks()

    def write(self, state: LockState, *, revision: int) -> bool:
        return self.inner.write(state, revision=revision)

    def now(self) -> datetime:
        return self.inner.now()

    def held(self, names: Iterable[str]) -> list[str]:
        """Which of ``names`` are locked now, on the store's clock."""
        wanted, now = set(names), self.inner.now()
        return [state.name for state in self.inner.locks() if state.name in wanted and state.is_held(now)]

    def calls_after(self, moment: float) -> list[tuple[str, str, float]]:
        with self._lock:
            return [call for call in self.calls if call[2] > moment]


@pytest.fixture(params=["memory", "redis", "mongo"])
def real_store(request: pytest.FixtureRequest) -> Iterator[LockStore]:
    """Each real store, in a namespace of this test's own."""
    if request.param == "memory":
        store: LockStore = MemoryLockStore()
    else:
        store = store_from_url(request.getfixturevalue(f"{request.param}_url"))
    yield store
    store.close()


def new_threads(before: set[threading.Thread]) -> list[str]:
    """The mutexcron threads alive now that were not alive at ``before``."""
    return [t.name for t in threading.enumerate() if t.name.startswith("mutexcron") and t not in before]


def first_fire_in(seconds: float) -> timedelta:
    """A clock skew that makes ``* * * * * *`` fire ``seconds`` from now rather than at the next whole second."""
    target = time.time() + seconds
    return timedelta(seconds=math.floor(target) + 1 - target)


def start_one_job(store: LockStore, registry: Registry, name: str, body: Callable[[], object],
                  lease: timedelta = timedelta(minutes=10)) -> tuple[Scheduler, set[threading.Thread]]:
    """Start a scheduler of one every-second job whose first fire is 50 ms away; also returns the threads
    that were alive before, for :func:`new_threads`."""
    mutex_cron("* * * * * *", name=name, lease=lease, registry=registry)(body)
    scheduler = Scheduler(store, registry=registry, instance_id="A", clock_skew=first_fire_in(0.05))
    before = set(threading.enumerate())
    scheduler.start()
    return scheduler, before


# -- the exact hang of the issue, and the race --------------------------------------------------------------


def test_a_heartbeat_added_after_stop_starts_no_thread_and_stop_returns(registry: Registry) -> None:
    # stop() while the thread is inside a renewal, then add() from a fire that was still acquiring: the
    # old registry started a second thread and revived the first, so that stop() waited forever.
    store = SlowStore(MemoryLockStore())
    mutex_cron("* * * * *", name="beating", lease=timedelta(seconds=0.3), registry=registry)(lambda: None)
    job = registry.get("beating")
    token = store.inner.acquire("beating", owner="A", lease=job.lease, fire_time=None).token
    assert token is not None
    renewing = store.hold("renew")
    heartbeats = Heartbeats(store)
    before = set(threading.enumerate())
    heartbeats.add(job, JobContext("beating", TICK, "A", token))
    assert renewing.entered.wait(5)
    stopper = threading.Thread(target=heartbeats.stop, name="test-stopper", daemon=True)
    stopper.start()
    wait_until(lambda: heartbeats.stopped, what="stop() to begin")

    late = heartbeats.add(job, JobContext("beating", TICK + timedelta(minutes=1), "A", token))
    renewing.go.set()
    stopper.join(timeout=5)

    assert not stopper.is_alive(), "stop() never returned"
    assert late is None
    wait_until(lambda: not new_threads(before), timeout=2, what="the heartbeat thread to end")


def test_a_fire_blocked_in_acquire_during_shutdown_runs_before_shutdown_returns_and_releases_its_lock(
    real_store: LockStore, registry: Registry
) -> None:
    # The tick is already being acquired: shutdown waits for it (a graceful shutdown, like a worker's warm
    # shutdown), so the tick is not lost, and its body starts and ends before shutdown() returns.
    store = SlowStore(real_store)
    started: list[float] = []
    acquiring = store.hold("acquire")
    scheduler, before = start_one_job(store, registry, "late", lambda: started.append(time.monotonic()))
    assert acquiring.entered.wait(5)
    returned: list[float] = []
    stopper = threading.Thread(target=lambda: returned.append((scheduler.shutdown(), time.monotonic())[1]))
    stopper.start()
    wait_until(lambda: not scheduler.running, what="shutdown to begin")

    acquiring.go.set()
    stopper.join(timeout=10)

    assert returned, "shutdown() did not return"
    assert len(started) == 1 and started[0] < returned[0]
    assert store.held(["late"]) == []
    assert store.calls_after(returned[0]) == []
    wait_until(lambda: not new_threads(before), timeout=2, what="every mutexcron thread to end")


def test_a_lock_won_after_shutdown_stopped_waiting_is_never_run(real_store: LockStore, registry: Registry) -> None:
    store = SlowStore(real_store)
    started: list[float] = []
    acquiring = store.hold("acquire")
    scheduler, before = start_one_job(store, registry, "too-late", lambda: started.append(time.monotonic()),
                                      lease=timedelta(seconds=1))
    assert acquiring.entered.wait(5)

    assert not scheduler.shutdown(timeout=timedelta(milliseconds=100))
    acquiring.go.set()  # the store answers after shutdown returned: the lock it gives is never used

    wait_until(lambda: not new_threads(before), timeout=5, what="the thread that was acquiring to end")
    assert started == []
    wait_until(lambda: not store.held(["too-late"]), timeout=3, what="the unused lock's lease to run out")


# -- a store call that hangs, and shutdown(wait=False) -------------------------------------------------------


def test_shutdown_returns_in_time_while_an_acquire_hangs(real_store: LockStore, registry: Registry) -> None:
    store = SlowStore(real_store)
    started: list[float] = []
    acquiring = store.hold("acquire")
    scheduler, before = start_one_job(store, registry, "hung", lambda: started.append(time.monotonic()))
    assert acquiring.entered.wait(5)

    began = time.monotonic()
    clean = scheduler.shutdown(timeout=timedelta(seconds=0.3))
    took = time.monotonic() - began
    acquiring.go.set()  # the store answers at last: the lock it gives is not used

    assert not clean
    assert took < 0.3 + SHUTDOWN_GRACE
    wait_until(lambda: not new_threads(before), timeout=5, what="the thread stuck in acquire to end")
    assert started == []


def test_shutdown_returns_in_time_while_a_release_hangs(registry: Registry) -> None:
    store = SlowStore(MemoryLockStore())
    releasing = store.hold("release")
    scheduler, before = start_one_job(store, registry, "sticky", lambda: None)
    try:
        assert releasing.entered.wait(5)
        began = time.monotonic()
        clean = scheduler.shutdown(timeout=timedelta(seconds=0.3))
        took = time.monotonic() - began

        assert not clean
        assert took < 0.3 + SHUTDOWN_GRACE
        assert new_threads(before) == ["mutexcron-job_0"]  # the one stuck in release; no heartbeat thread
    finally:
        releasing.go.set()
    wait_until(lambda: not new_threads(before), timeout=5, what="the worker to end")


def test_a_body_left_running_past_the_timeout_keeps_its_lock_only_until_its_lease_ends(registry: Registry) -> None:
    store = SlowStore(MemoryLockStore())
    entered, leave = threading.Event(), threading.Event()
    scheduler, _ = start_one_job(store, registry, "stuck", lambda: (entered.set(), leave.wait(HELD_FOR)),
                                 lease=timedelta(seconds=0.6))
    try:
        assert entered.wait(5)
        assert not scheduler.shutdown(timeout=timedelta(milliseconds=100))
        assert scheduler.running_jobs() == ["stuck"]
        assert store.held(["stuck"]) == ["stuck"]
        # No heartbeat renews it any more: another instance can take the job one lease later.
        wait_until(lambda: not store.held(["stuck"]), timeout=3, what="the lease to run out")
    finally:
        leave.set()
    wait_until(lambda: not scheduler.running_jobs(), what="the body to end")


def test_shutdown_without_wait_returns_at_once_and_the_last_body_to_end_cleans_up(registry: Registry) -> None:
    store = SlowStore(MemoryLockStore())
    entered, leave = threading.Event(), threading.Event()
    scheduler, before = start_one_job(store, registry, "long", lambda: (entered.set(), leave.wait(HELD_FOR)))
    assert entered.wait(5)

    began = time.monotonic()
    assert not scheduler.shutdown(wait=False)
    assert time.monotonic() - began < SHUTDOWN_GRACE
    assert store.held(["long"]) == ["long"]
    leave.set()

    wait_until(lambda: not store.held(["long"]), what="the body to release its lock")
    wait_until(lambda: not new_threads(before), timeout=2, what="every mutexcron thread to end")
    assert scheduler.running_jobs() == []


def test_run_now_on_a_shut_down_scheduler_raises(registry: Registry) -> None:
    mutex_cron("* * * * *", name="manual", registry=registry)(lambda: None)
    scheduler = Scheduler(MemoryLockStore(), registry=registry, instance_id="A")
    scheduler.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        scheduler.run_now("manual")


def test_a_scheduler_started_again_after_shutdown_fires_again(registry: Registry) -> None:
    fires: list[datetime] = []
    mutex_cron("* * * * * *", name="again", registry=registry)(lambda ctx: fires.append(ctx.fire_time))
    scheduler = Scheduler(MemoryLockStore(), registry=registry, instance_id="A", clock_skew=first_fire_in(0.05))
    with scheduler:
        wait_until(lambda: fires, what="a first fire")
    count = len(fires)
    with scheduler:
        wait_until(lambda: len(fires) > count, what="a fire after the restart")


# -- many jobs every second, shut down at random moments -----------------------------------------------------

JOBS = 12
SHUTDOWNS_PER_STORE = 70  # three stores: 210 shutdowns
TIMEOUT = timedelta(seconds=2)


@dataclass
class Round:
    """What one start-then-shutdown saw."""

    clean: bool
    began: float  # time.monotonic() when shutdown() was called
    returned: float  # and when it returned
    starts: list[float]  # time.monotonic() at the start of each body
    late_calls: list[tuple[str, str, float]]  # store calls that began after shutdown returned
    threads_left: list[str]
    locks_held: list[str]
    caught_acquiring: bool
    caught_running: bool
    start_took: float = 0.0  # seconds that start() took


def shut_down_at_random(store: SlowStore, chance: random.Random, *, start_takes: float = 0.0,
                        **options: Any) -> Round:
    """Start JOBS every-second jobs whose first fire is 30 ms after start() returns (``start_takes``: how long
    start() is expected to take, the last round's time on a slow store), and shut down 0-150 ms after it."""


    registry = Registry()
    names = [f"r{uuid.uuid4().hex[:8]}-{n}" for n in range(JOBS)]
    starts: list[float] = []

    def body() -> None:
        starts.append(time.monotonic())
        time.sleep(chance.uniform(0, 0.03))  # the body's own work

    for name in names:
        mutex_cron("* * * * * *", name=name, registry=registry, lease=timedelta(seconds=10))(body)
    store.seed(names)  # so that start() is quick and the first fire comes when it was meant to
    scheduler = Scheduler(store, registry=registry, instance_id="A", shutdown_timeout=TIMEOUT,
                          clock_skew=first_fire_in(start_takes + 0.03), **options)
    before = set(threading.enumerate())
    starting = time.monotonic()
    scheduler.start()
    start_took = time.monotonic() - starting
    time.sleep(chance.uniform(0, 0.15))  # the random moment (a test input)
    acquiring, running = store.acquiring > 0, bool(scheduler.running_jobs())
    began = time.monotonic()
    clean = scheduler.shutdown()
    returned = time.monotonic()
    return Round(clean, began, returned, starts, store.calls_after(returned), new_threads(before),
                 store.held(names), acquiring, running, start_took)


def test_shutdown_at_random_moments_returns_in_time_and_leaves_nothing_behind(real_store: LockStore) -> None:
    shut_down_many_times(SlowStore(real_store, acquire_latency=(0.002, 0.03)), SHUTDOWNS_PER_STORE)


def shut_down_many_times(store: SlowStore, count: int, **options: Any) -> None:
    """``count`` rounds of :func:`shut_down_at_random`, each checked; prints how long the shutdowns took. Where
    too few moments caught a fire acquiring or a body running (a loaded machine starts the scheduler late), more
    rounds follow, up to three times ``count``, so that those moments are always tested."""
    seed = random.randrange(1 << 30)
    chance = random.Random(seed)
    rounds: list[Round] = []

    def covered() -> bool:
        return (sum(r.caught_acquiring for r in rounds) >= count // 14
                and sum(r.caught_running for r in rounds) >= count // 14)

    number = 0
    while number < count or (not covered() and number < 3 * count):
        result = shut_down_at_random(store, chance, start_takes=rounds[-1].start_took if rounds else 0.0, **options)
        number += 1
        rounds.append(result)
        where = f"round {number} (seed {seed}): {result}"
        assert result.clean, where
        assert result.returned - result.began < TIMEOUT.total_seconds() + SHUTDOWN_GRACE, where
        assert [start for start in result.starts if start > result.returned] == [], where
        assert result.late_calls == [], where
        assert result.threads_left == [], where
        assert result.locks_held == [], where
    took = sorted(r.returned - r.began for r in rounds)
    acquiring, running = sum(r.caught_acquiring for r in rounds), sum(r.caught_running for r in rounds)
    print(f"\n{type(store.inner).__name__}: {len(rounds)} shutdowns, {acquiring} while acquiring, {running} while "
          f"bodies ran; shutdown took median {statistics.median(took) * 1000:.1f} ms, p90 "
          f"{took[int(len(took) * 0.9)] * 1000:.1f} ms, max {took[-1] * 1000:.1f} ms")
    assert covered(), "the random moments missed the fires"
