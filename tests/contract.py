"""The store contracts, as tests (subclass with a ``store`` fixture), one class a contract:

- :class:`LockContract`, what every store's lock does (a store of the lock methods alone, too);
- :class:`StoreContract`, what a store with the control plane implements itself (the lock, the primitives read,
  locks and write, and its acquire's rules);
- :class:`VerbsContract`, the control verbs built once on the primitives: whole on the memory store, a sample of
  it (:class:`VerbsSampleContract`) on each real store;
- :class:`SchedulerContract` and :class:`ControlSchedulerContract`, schedulers run on a store.

The lock tests judge a store by what acquire, renew and release answer; on a store with the control plane they
also read the lock documents (``self.control``). Leases are short and real: expiry is awaited by polling the
store with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from mutexcron.stores import AcquireStatus, ControlStore, LockStore
from tests.acquire_rules_contract import AcquireRulesContract
from tests.alert_contract import AlertsContract
from tests.backfill_contract import BackfillContract
from tests.batch_contract import AcquireManyContract, ReleaseManyContract
from tests.catchup_contract import CatchUpContract
from tests.control_contract import FleetControlContract
from tests.document_contract import FIRE_1, FIRE_2, LONG, DocumentContract
from tests.limits_contract import RunLimitsContract
from tests.overlap_contract import OverlapVerbsContract
from tests.overlap_policy_contract import OverlapPolicyContract
from tests.pause_contract import PauseContract
from tests.primitives_contract import ControlPrimitivesContract
from tests.runtime_schedule_contract import RuntimeScheduleContract
from tests.stale_schedule_contract import StaleScheduleContract
from tests.support import wait_until
from tests.takeover_contract import TakeOverContract

__all__ = ["FIRE_1", "FIRE_2", "LONG", "VERBS_SAMPLE", "ControlSchedulerContract", "LockContract", "SchedulerContract",
           "StoreContract", "VerbsContract", "VerbsSampleContract"]


class LockContract(AcquireManyContract, ReleaseManyContract):
    """The lock's verbs: what acquire, renew and release answer (and, with the control plane, what they write)."""

    store: LockStore  # set by the subclass's autouse fixture

    @property
    def control(self) -> ControlStore | None:
        """The store, if it has the control plane to read its lock documents with; else None."""
        return self.store if isinstance(self.store, ControlStore) else None

    def run_together(self, target: Callable[..., None], arguments: list[tuple[object, ...]]) -> None:
        """Run ``target`` in one thread per argument tuple, all released at once by a barrier."""
        barrier = threading.Barrier(len(arguments))

        def run(*args: object) -> None:
            try:
                barrier.wait()
                target(*args)
            finally:
                self.thread_finished()

        threads = [threading.Thread(target=run, args=args) for args in arguments]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def thread_finished(self) -> None:
        """Called at the end of each thread of run_together (a store may close per-thread connections)."""

    # -- seeding ------------------------------------------------------------------------------

    def test_seed_creates_an_unlocked_document_per_name(self) -> None:
        assert self.store.seed(["a.one", "a.two"]) == 2
        if self.control is None:  # free and never fired: the first acquire of any tick takes it, token 1
            for name in ("a.one", "a.two"):
                assert self.store.acquire(name, owner="A", lease=LONG, fire_time=FIRE_1).token == 1
            return
        states = self.control.locks()
        assert [s.name for s in states] == ["a.one", "a.two"]
        for state in states:
            assert not state.locked
            assert state.token == 0
            assert state.last_fire_time is None
            assert state.locked_by is None

    def test_seed_counts_only_documents_it_created(self) -> None:
        self.store.seed(["a.one"])
        assert self.store.seed(["a.one", "a.two"]) == 1

    def test_seed_never_resets_a_held_lock(self) -> None:
        self.store.seed(["job"])
        acquired = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        self.store.seed(["job"])
        busy = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert busy.status is AcquireStatus.BUSY and busy.holder == "A"
        assert acquired.token is not None and self.store.renew("job", token=acquired.token, lease=LONG)
        if self.control is None:
            return
        state = self.control.lock("job")
        assert state is not None
        assert state.locked and state.locked_by == "A" and state.token == acquired.token
        assert state.last_fire_time == FIRE_1

    def test_concurrent_seeding_creates_each_document_once(self) -> None:
        names = [f"job.{i}" for i in range(5)]
        created: list[int] = []
        self.run_together(lambda: created.append(self.store.seed(names)), [()] * 8)
        assert sum(created) == 5
        if self.control is not None:
            assert [s.name for s in self.control.locks()] == names

    # -- acquiring ----------------------------------------------------------------------------

    def test_acquire_takes_a_free_lock_and_records_the_holder(self) -> None:
        self.store.seed(["job"])
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert acquisition.status is AcquireStatus.ACQUIRED
        assert acquisition.token == 1
        busy = self.store.acquire("job", owner="B", lease=LONG, fire_time=None)
        assert busy.status is AcquireStatus.BUSY and busy.holder == "A"
        if self.control is None:
            return
        state = self.control.lock("job")
        assert state is not None
        assert state.locked and state.locked_by == "A"
        assert state.last_fire_time == FIRE_1
        assert state.lock_until is not None and state.last_locked_at is not None
        assert state.lock_until - state.last_locked_at == LONG

    def test_acquire_creates_a_missing_document(self) -> None:
        acquisition = self.store.acquire("never.seeded", owner="A", lease=LONG, fire_time=FIRE_1)
        assert acquisition.acquired
        assert self.store.acquire("never.seeded", owner="B", lease=LONG, fire_time=FIRE_2).holder == "A"
        if self.control is not None:
            assert self.control.lock("never.seeded") is not None

    def test_token_grows_with_every_acquisition(self) -> None:
        tokens = []
        for day in range(3):
            acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1 + timedelta(days=day))
            assert acquisition.token is not None
            tokens.append(acquisition.token)
            self.store.release("job", token=acquisition.token)
        assert tokens == [1, 2, 3]

    def test_a_held_lock_is_busy_and_names_its_holder(self) -> None:
        self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        acquisition = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert acquisition.status is AcquireStatus.BUSY
        assert acquisition.holder == "A"

    def test_the_same_fire_time_cannot_be_taken_twice(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert first.token is not None
        self.store.release("job", token=first.token)
        again = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_1)
        assert again.status is AcquireStatus.ALREADY_RAN

    def test_an_older_fire_time_counts_as_already_ran(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_2)
        assert first.token is not None
        self.store.release("job", token=first.token)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_1).status is AcquireStatus.ALREADY_RAN

    def test_already_ran_wins_over_busy_while_the_tick_still_runs(self) -> None:
        self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_1).status is AcquireStatus.ALREADY_RAN

    def test_a_manual_acquire_ignores_and_keeps_the_last_fire_time(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_2)
        assert first.token is not None
        self.store.release("job", token=first.token)
        manual = self.store.acquire("job", owner="B", lease=LONG, fire_time=None)
        assert manual.acquired and manual.token is not None
        if self.control is not None:
            state = self.control.lock("job")
            assert state is not None and state.last_fire_time == FIRE_2
        self.store.release("job", token=manual.token)
        assert self.store.acquire("job", owner="C", lease=LONG, fire_time=FIRE_2).status is AcquireStatus.ALREADY_RAN

    def test_only_one_of_many_concurrent_acquirers_wins(self) -> None:
        self.store.seed(["job"])
        results = []

        def acquire(owner: str) -> None:
            results.append(self.store.acquire("job", owner=owner, lease=LONG, fire_time=FIRE_1).status)

        self.run_together(acquire, [(f"I{i}",) for i in range(8)])
        assert results.count(AcquireStatus.ACQUIRED) == 1

    def test_an_expired_lease_can_be_taken_over(self) -> None:
        self.store.acquire("job", owner="crashed", lease=timedelta(milliseconds=300), fire_time=FIRE_1)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).status is AcquireStatus.BUSY
        assert wait_until(
            lambda: self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).acquired, timeout=5
        )
        assert self.store.acquire("job", owner="C", lease=LONG, fire_time=None).holder == "B"
        if self.control is not None:
            state = self.control.lock("job")
            assert state is not None and state.locked_by == "B" and state.token == 2

    # -- renewing -----------------------------------------------------------------------------

    def test_renew_extends_the_lease_from_the_store_clock(self) -> None:
        # A lease long enough for a renewal and an acquire on a loaded machine (two calls on MariaDB can be more
        # than 300 ms apart while other suites share the CPUs), renewed for two of them.
        lease = timedelta(seconds=1)
        acquisition = self.store.acquire("job", owner="A", lease=lease, fire_time=FIRE_1)
        assert acquisition.token is not None
        deadline = time.monotonic() + 2 * lease.total_seconds()
        while time.monotonic() < deadline:
            renewed_after = self.store.now()
            assert self.store.renew("job", token=acquisition.token, lease=lease)
            assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).status is AcquireStatus.BUSY
            time.sleep(0.25)
        if self.control is None:  # renewed past two leases, it is still held
            return
        state = self.control.lock("job")
        assert state is not None and state.lock_until is not None
        # The last renewal's lease counts from the store's clock when it ran (at or after renewed_after).
        assert state.lock_until >= renewed_after + lease - timedelta(milliseconds=1)

    def test_renew_with_a_stale_token_fails(self) -> None:
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert acquisition.token is not None
        assert not self.store.renew("job", token=acquisition.token + 1, lease=LONG)

    # -- releasing ----------------------------------------------------------------------------

    def test_release_frees_the_lock(self) -> None:
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert acquisition.token is not None
        assert self.store.release("job", token=acquisition.token)
        if self.control is not None:
            state = self.control.lock("job")
            assert state is not None and not state.locked and state.last_released_at is not None
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).acquired

    def test_a_stale_holder_cannot_release_the_new_holders_lock(self) -> None:
        stale = self.store.acquire("job", owner="A", lease=timedelta(milliseconds=200), fire_time=FIRE_1)
        assert stale.token is not None
        assert wait_until(lambda: self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).acquired)
        assert not self.store.release("job", token=stale.token)
        assert not self.store.renew("job", token=stale.token, lease=LONG)
        assert self.store.acquire("job", owner="C", lease=LONG, fire_time=None).holder == "B"
        if self.control is not None:
            state = self.control.lock("job")
            assert state is not None and state.locked and state.locked_by == "B"

    def test_hold_at_least_keeps_the_lock_until_start_plus_hold(self) -> None:
        hold = timedelta(milliseconds=600)
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=None)
        assert acquisition.token is not None
        assert self.store.release("job", token=acquisition.token, hold_at_least=hold)
        if self.control is not None:
            state = self.control.lock("job")
            assert state is not None and state.last_locked_at is not None
            assert state.lock_until == state.last_locked_at + hold
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=None).status is AcquireStatus.BUSY
        assert wait_until(lambda: self.store.acquire("job", owner="B", lease=LONG, fire_time=None).acquired)

    def test_release_after_the_hold_period_frees_at_once(self) -> None:
        hold = timedelta(milliseconds=100)
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=None)
        assert acquisition.token is not None
        locked_at = self.store.now()  # at or after the acquire, on the store's clock
        if self.control is not None:
            state = self.control.lock("job")
            assert state is not None and state.last_locked_at is not None
            locked_at = state.last_locked_at
        assert wait_until(lambda: self.store.now() > locked_at + hold)  # the hold passes on the store's clock
        assert self.store.release("job", token=acquisition.token, hold_at_least=hold)
        if self.control is None:
            assert self.store.acquire("job", owner="B", lease=LONG, fire_time=None).acquired
            return
        state = self.control.lock("job")
        assert state is not None and not state.locked

    def test_now_is_an_aware_utc_time_close_to_ours(self) -> None:
        now = self.store.now()
        assert now.utcoffset() == timedelta(0)
        assert abs(now - datetime.now(UTC)) < timedelta(seconds=5)

    def test_unusual_but_valid_names_round_trip(self) -> None:
        names = ["报告.日报", "tests.module.<locals>.job", "a:b@c/d+e-f", "x" * 200]
        assert self.store.seed(names) == len(names)
        if self.control is not None:
            assert sorted(s.name for s in self.control.locks()) == sorted(names)
        for name in names:
            assert self.store.acquire(name, owner="A", lease=LONG, fire_time=FIRE_1).acquired
            assert self.store.acquire(name, owner="B", lease=LONG, fire_time=FIRE_2).holder == "A"
            if self.control is not None:
                state = self.control.lock(name)
                assert state is not None and state.name == name and state.locked


class StoreContract(LockContract, ControlPrimitivesContract, AcquireRulesContract):
    """What a store with the control plane implements itself: the lock, the primitives read, locks and write, and
    the rules its acquire and release keep of the control state."""


class VerbsContract(DocumentContract, FleetControlContract, AlertsContract, PauseContract, TakeOverContract,
                    OverlapVerbsContract):
    """The control verbs, written once on the primitives (mutexcron.stores.changes): run whole on the memory store,
    whose every operation is one of them; each real store runs :class:`VerbsSampleContract`."""


# One test of each verb, the racing ones first: on a real store they prove that the verbs' compare-and-set on its
# revision holds against its own acquire, release and concurrent writers.
VERBS_SAMPLE = frozenset({
    "test_force_unlock_frees_a_held_lock_and_fences_off_its_holder",
    "test_a_token_is_never_issued_twice_across_a_delete",
    "test_no_acquire_racing_a_pause_wins_once_pause_has_returned",
    "test_define_revives_a_deleted_document_keeping_its_token_last_fire_and_pause",
    "test_after_set_schedule_returns_no_concurrent_acquire_of_the_old_version_wins",
    "test_racing_opens_of_an_incident_open_it_exactly_once",
    "test_one_of_many_counts_at_once_pauses_the_job",
    "test_a_second_worker_takes_the_run_once_the_first_takers_lease_ran_out",
    "test_replacing_asks_the_holder_to_stop_and_renews_its_lease",
})


class VerbsSampleContract(VerbsContract):
    """A short run of the verbs' suite on a real store (:data:`VERBS_SAMPLE`); the rest runs on the memory store."""


for _name in dir(VerbsContract):
    if _name.startswith("test_") and _name not in VERBS_SAMPLE:
        setattr(VerbsSampleContract, _name, None)  # pytest collects no test by that name here


class SchedulerContract(BackfillContract, RunLimitsContract):
    """Schedulers on any LockStore, one of the lock methods alone included: backfills and run limits."""


class ControlSchedulerContract(SchedulerContract, CatchUpContract, RuntimeScheduleContract, StaleScheduleContract,
                               OverlapPolicyContract):
    """Schedulers on a store with the control plane: catch-up, run-time schedules, stale schedules and the overlap
    policies too."""
