"""The take-over part of the store contract (:meth:`mutexcron.stores.ControlStore.take_over`): a run handed to a task
worker (``run_on="tasks"``) is taken over under a token of the worker's own, so that a worker that stalled and lost
it can neither renew nor release it, and a second worker takes it only once the first one's lease ran out; and the
acquire refusals that a removed run-time schedule relies on (a manual run checked against the store's version, a
refused tombstone left hidden).

Mixed into :class:`tests.contract.VerbsContract`, the verbs built once on the primitives and proven on the memory store.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mutexcron.stores import AcquireStatus, ControlStore, LockStore
from tests.support import wait_until

LONG = timedelta(seconds=30)
SHORT = timedelta(milliseconds=400)
TICK = datetime(2026, 4, 1, 6, 0, tzinfo=UTC)
NEXT_TICK = TICK + timedelta(minutes=1)


class TakeOverContract:
    """A run taken over by a task worker, decided atomically by the store on its clock."""

    store: LockStore

    @property
    def taking(self) -> ControlStore:
        assert isinstance(self.store, ControlStore)
        return self.store

    @property
    def documents(self) -> ControlStore:
        assert isinstance(self.store, ControlStore)
        return self.store

    def enqueued(self, *, lease: timedelta = LONG, fire_time: datetime | None = TICK) -> int:
        """A scheduler's acquire of the tick, kept for a worker; its token (the run's tick token)."""
        won = self.store.acquire("job", owner="scheduler", lease=lease, fire_time=fire_time)
        assert won.acquired and won.token is not None
        return won.token

    def lease_ran_out(self) -> None:
        wait_until(lambda: not self.documents.lock("job").is_held(self.store.now()),  # type: ignore[union-attr]
                   timeout=5, what="the lease to run out on the store's clock")

    def test_the_worker_takes_the_run_over_under_a_new_token(self) -> None:
        tick = self.enqueued()
        taken = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert taken.acquired and taken.token == tick + 1
        state = self.documents.lock("job")
        assert state is not None
        assert (state.token, state.tick_token, state.locked_by) == (tick + 1, tick, "worker-1")
        assert state.last_fire_time == TICK

    def test_the_acquirers_token_can_neither_renew_nor_release_a_run_taken_over(self) -> None:
        tick = self.enqueued()
        self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert not self.store.renew("job", token=tick, lease=LONG)
        assert not self.store.release("job", token=tick)
        assert self.documents.lock("job").locked  # type: ignore[union-attr]

    def test_the_taker_renews_and_releases_with_its_own_token(self) -> None:
        tick = self.enqueued()
        taken = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert taken.token is not None
        assert self.store.renew("job", token=taken.token, lease=LONG)
        assert self.store.release("job", token=taken.token, outcome="succeeded")
        state = self.documents.lock("job")
        assert state is not None and not state.locked and state.tick_token == 0

    def test_a_second_worker_is_busy_while_the_first_takers_lease_is_live(self) -> None:
        tick = self.enqueued()
        self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        second = self.taking.take_over("job", tick_token=tick, owner="worker-2", lease=LONG)
        assert second.status is AcquireStatus.BUSY and second.holder == "worker-1"

    def test_a_second_worker_takes_the_run_once_the_first_takers_lease_ran_out(self) -> None:
        tick = self.enqueued()
        first = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=SHORT)
        assert first.token is not None
        self.lease_ran_out()
        second = self.taking.take_over("job", tick_token=tick, owner="worker-2", lease=LONG)
        assert second.acquired and second.token == first.token + 1
        assert not self.store.renew("job", token=first.token, lease=LONG)  # the stalled worker lost it for good
        assert not self.store.release("job", token=first.token)

    def test_the_acquirers_expired_lease_is_still_taken_over_while_no_other_run_took_the_lock(self) -> None:
        tick = self.enqueued(lease=SHORT)
        self.lease_ran_out()
        assert self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG).acquired

    def test_a_manual_runs_lock_is_taken_over_too(self) -> None:
        tick = self.enqueued(fire_time=None)
        assert self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG).token == tick + 1

    def test_a_released_run_is_not_taken_over_again(self) -> None:
        tick = self.enqueued()
        taken = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert taken.token is not None
        assert self.store.release("job", token=taken.token)
        again = self.taking.take_over("job", tick_token=tick, owner="worker-2", lease=LONG)
        assert again.status is AcquireStatus.ALREADY_RAN

    def test_a_run_released_within_hold_at_least_is_not_taken_over_again(self) -> None:
        tick = self.enqueued()
        taken = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert taken.token is not None
        assert self.store.release("job", token=taken.token, hold_at_least=LONG)
        assert self.documents.lock("job").locked  # type: ignore[union-attr]
        again = self.taking.take_over("job", tick_token=tick, owner="worker-2", lease=LONG)
        assert again.status is AcquireStatus.ALREADY_RAN

    def test_a_force_unlocked_run_is_not_taken_over(self) -> None:
        tick = self.enqueued()
        assert self.documents.force_unlock("job")
        assert self.taking.take_over("job", tick_token=tick, owner="w", lease=LONG).status is AcquireStatus.ALREADY_RAN

    def test_a_run_whose_lock_a_later_tick_took_is_not_taken_over(self) -> None:
        tick = self.enqueued(lease=SHORT)
        self.lease_ran_out()
        assert self.store.acquire("job", owner="scheduler", lease=LONG, fire_time=NEXT_TICK).acquired
        refused = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert refused.status is AcquireStatus.ALREADY_RAN
        assert self.documents.lock("job").locked_by == "scheduler"  # type: ignore[union-attr]

    def test_a_later_tick_finds_a_run_taken_over_busy_for_one_more_lease_after_its_lease_ran_out(self) -> None:
        tick = self.enqueued()
        self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=SHORT)
        self.lease_ran_out()
        later = self.store.acquire("job", owner="scheduler", lease=LONG, fire_time=NEXT_TICK)
        assert later.status is AcquireStatus.BUSY and later.holder == "worker-1"
        assert self.taking.take_over("job", tick_token=tick, owner="worker-2", lease=LONG).acquired  # the retry

    def test_a_later_tick_takes_the_lock_once_the_retrys_extra_lease_ran_out(self) -> None:
        tick = self.enqueued()
        self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=SHORT)
        wait_until(lambda: self.store.acquire("job", owner="scheduler", lease=SHORT, fire_time=NEXT_TICK).acquired,
                   timeout=5, what="the lock to be free two short leases after the worker's last renewal")
        assert self.taking.take_over("job", tick_token=tick, owner="late", lease=LONG).status is (
            AcquireStatus.ALREADY_RAN)

    def test_a_run_no_worker_took_over_is_free_once_its_lease_ran_out(self) -> None:
        self.enqueued(lease=SHORT)
        self.lease_ran_out()
        assert self.store.acquire("job", owner="scheduler", lease=LONG, fire_time=NEXT_TICK).acquired

    def test_a_job_without_a_document_has_no_run_to_take_over(self) -> None:
        refused = self.taking.take_over("nothing", tick_token=1, owner="worker-1", lease=LONG)
        assert refused.status is AcquireStatus.ALREADY_RAN

    def test_a_paused_job_refuses_the_take_over_and_releases_the_unrun_lock(self) -> None:
        tick = self.enqueued()
        self.documents.pause("job", by="ops")
        refused = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        assert refused.status is AcquireStatus.PAUSED
        state = self.documents.lock("job")
        assert state is not None and not state.locked and state.tick_token == 0 and state.token == tick

    def test_a_stale_schedule_refuses_the_take_over_and_releases_the_unrun_lock(self) -> None:
        tick = self.enqueued()
        changed = self.documents.set_schedule("job", "*/5 * * * *", by="ops")
        assert changed is not None
        refused = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG,
                                        schedule_version=changed.schedule_version - 1)
        assert refused.status is AcquireStatus.STALE_SCHEDULE
        assert refused.schedule_version == changed.schedule_version
        assert not self.documents.lock("job").locked  # type: ignore[union-attr]

    def test_the_current_schedule_version_takes_the_run_over(self) -> None:
        tick = self.enqueued()
        version = self.documents.lock("job").schedule_version  # type: ignore[union-attr]
        assert self.taking.take_over("job", tick_token=tick, owner="w", lease=LONG, schedule_version=version).acquired

    def test_a_pause_does_not_release_a_run_a_worker_already_took_over(self) -> None:
        tick = self.enqueued()
        taken = self.taking.take_over("job", tick_token=tick, owner="worker-1", lease=LONG)
        self.documents.pause("job", by="ops")
        refused = self.taking.take_over("job", tick_token=tick, owner="worker-2", lease=LONG)
        assert refused.status is AcquireStatus.PAUSED
        state = self.documents.lock("job")
        assert state is not None and state.locked and state.token == taken.token

    # -- the acquire refusals a removed run-time schedule relies on ----------------------------

    def test_a_manual_acquire_for_another_schedule_version_is_refused_stale(self) -> None:
        self.store.seed(["job"])
        changed = self.documents.set_schedule("job", "*/5 * * * *", by="ops")
        assert changed is not None
        refused = self.store.acquire("job", owner="A", lease=LONG, fire_time=None,
                                     schedule_version=changed.schedule_version - 1)
        assert refused.status is AcquireStatus.STALE_SCHEDULE
        assert refused.schedule_version == changed.schedule_version
        assert not self.documents.lock("job").locked  # type: ignore[union-attr]

    def test_an_acquire_refused_stale_leaves_a_removed_schedules_document_hidden(self) -> None:
        defined = self.documents.define("job", '{"cron": "* * * * *", "target": "t"}', by="ops")
        assert defined is not None
        assert self.documents.define("job", None, by="ops") is not None
        for fire_time in (None, TICK):
            refused = self.store.acquire("job", owner="stale", lease=LONG, fire_time=fire_time,
                                         schedule_version=defined.schedule_version)
            assert refused.status is AcquireStatus.STALE_SCHEDULE
        assert self.documents.lock("job") is None
        assert "job" not in [state.name for state in self.documents.locks()]
