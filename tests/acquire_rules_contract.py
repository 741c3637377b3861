"""What each store's own acquire and release keep of the control state, in the same atomic step: a pause, the
schedule version, the overlap slot, a task worker's take-over, a deleted document, a run's outcome. The control
verbs that write that state are shared (mutexcron.stores.changes) and proven once on the memory store
(tests/test_stores.py); these are the rules every store's acquire answers them with, proven on each.
"""

from __future__ import annotations

from datetime import timedelta

from mutexcron.stores import AcquireStatus, ControlStore, LockState, LockStore
from tests.document_contract import FIRE_1, FIRE_2, LONG
from tests.support import wait_until

SHORT = timedelta(milliseconds=300)
FIRE_3 = FIRE_2 + timedelta(days=1)


class AcquireRulesContract:
    """A store's acquire and release reading and writing the document the control verbs change."""

    store: LockStore

    @property
    def documents(self) -> ControlStore:
        assert isinstance(self.store, ControlStore)
        return self.store

    def document(self, name: str = "job") -> LockState:
        state = self.documents.lock(name)
        assert state is not None
        return state

    def test_a_pause_refuses_every_acquire_first_and_resume_lets_them_in(self) -> None:
        self.store.seed(["job"])
        assert self.documents.pause("job", by="ops") is not None
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1).status is AcquireStatus.PAUSED
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=None).status is AcquireStatus.PAUSED
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1,
                                  schedule_version=9).status is AcquireStatus.PAUSED
        assert self.documents.resume("job") is not None
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1).acquired

    def test_a_pause_ends_by_itself_at_its_until_on_the_stores_clock(self) -> None:
        self.store.seed(["job"])
        self.documents.pause("job", until=self.store.now() + SHORT)
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1).status is AcquireStatus.PAUSED
        wait_until(lambda: self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1).acquired, timeout=5,
                   what="the pause to end at its until")

    def test_an_acquire_for_another_schedule_version_is_refused_with_the_stores_version(self) -> None:
        self.store.seed(["job"])
        version = self.documents.set_schedule("job", "*/5 * * * *")
        assert version is not None and version.schedule_version == 1
        stale = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1, schedule_version=0)
        assert stale.status is AcquireStatus.STALE_SCHEDULE and stale.schedule_version == 1
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1, schedule_version=1).acquired

    def test_a_removed_schedules_document_refuses_its_old_version_and_stays_hidden(self) -> None:
        defined = self.documents.define("job", '{"spec": "* * * * *"}')
        assert defined is not None
        assert self.documents.define("job", None) is not None
        refused = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1,
                                     schedule_version=defined.schedule_version)
        assert refused.status is AcquireStatus.STALE_SCHEDULE
        assert self.documents.lock("job") is None

    def test_a_live_slot_keeps_the_lock_for_its_tick_which_empties_it(self) -> None:
        held = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert held.token is not None and self.documents.claim_next("job", fire_time=FIRE_3, lease=LONG)
        assert self.store.release("job", token=held.token)
        other = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert other.status is AcquireStatus.BUSY
        assert self.store.acquire("job", owner="C", lease=LONG, fire_time=FIRE_3).acquired
        assert self.document().next_fire is None

    def test_a_stop_request_reaches_the_renewing_holder(self) -> None:
        held = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert held.token is not None
        assert self.documents.renew_watching("job", token=held.token, lease=LONG).value == "renewed"
        assert self.documents.claim_next("job", fire_time=FIRE_2, lease=LONG, replace=True)
        assert self.documents.renew_watching("job", token=held.token, lease=LONG).value == "stop"

    def test_a_run_taken_over_is_kept_one_more_lease_for_its_retry(self) -> None:
        tick = self.store.acquire("job", owner="scheduler", lease=LONG, fire_time=FIRE_1).token
        assert tick is not None
        taken = self.documents.take_over("job", tick_token=tick, owner="worker-1", lease=SHORT)
        assert taken.token == tick + 1
        assert not self.store.renew("job", token=tick, lease=LONG)
        assert self.store.renew("job", token=taken.token, lease=SHORT)
        wait_until(lambda: not self.document().is_held(self.store.now()), timeout=5, what="the taker's lease to end")
        later = self.store.acquire("job", owner="scheduler", lease=LONG, fire_time=FIRE_2)
        assert later.status is AcquireStatus.BUSY and later.holder == "worker-1"

    def test_an_acquire_revives_a_deleted_document_with_its_token(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert first.token is not None and self.store.release("job", token=first.token)
        assert self.documents.delete("job")
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_1).status is (
            AcquireStatus.ALREADY_RAN)
        assert self.documents.lock("job") is None
        again = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert again.token == first.token + 1 and self.document().locked_by == "B"

    def test_release_keeps_the_outcome_and_a_success_resets_the_failure_count(self) -> None:
        held = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert held.token is not None and self.documents.record_failure("job") == (1, False)
        assert self.store.release("job", token=held.token, outcome="failed", error="Traceback\nValueError: boom")
        failed = self.document()
        assert failed.last_outcome == "failed" and failed.last_error == "ValueError: boom" and failed.failures == 1
        assert failed.tick_token == 0 and failed.last_finished_at is not None and failed.last_success_at is None
        again = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_2)
        assert again.token is not None and self.store.release("job", token=again.token, outcome="succeeded")
        succeeded = self.document()
        assert succeeded.failures == 0 and succeeded.last_error is None and succeeded.last_success_at is not None
