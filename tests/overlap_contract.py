"""The overlap verbs (:meth:`mutexcron.stores.ControlStore.claim_next`): one next-tick slot per lock document,
kept by acquire, and a stop request to the holder, seen by its renewal (docs: on_busy "buffer_one" and
"replace").

Mixed into :class:`tests.contract.VerbsContract` (the verbs, built once on the primitives, proven on the memory
store; each store's acquire keeps the slot: tests/acquire_rules_contract.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mutexcron.stores import AcquireStatus, ControlStore, LockStore, Renewal

LONG = timedelta(seconds=30)
T1 = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
T2, T3 = T1 + timedelta(minutes=1), T1 + timedelta(minutes=2)


class OverlapVerbsContract:
    """The slot and the stop request, decided atomically by the store on its clock."""

    store: LockStore

    @property
    def overlap(self) -> ControlStore:
        assert isinstance(self.store, ControlStore)
        return self.store

    def running(self) -> int:
        """T1's run holding the lock; its token."""
        taken = self.store.acquire("job", owner="A", lease=LONG, fire_time=T1)
        assert taken.token is not None
        return taken.token

    def test_a_tick_finding_the_lock_held_takes_the_empty_slot(self) -> None:
        self.running()
        assert self.overlap.claim_next("job", fire_time=T2, lease=LONG)

    def test_the_slot_keeps_one_tick_and_refuses_another(self) -> None:
        self.running()
        assert self.overlap.claim_next("job", fire_time=T2, lease=LONG)
        assert not self.overlap.claim_next("job", fire_time=T3, lease=LONG)
        assert self.overlap.claim_next("job", fire_time=T2, lease=LONG)  # the same tick, from another instance

    def test_a_released_lock_with_a_live_slot_is_busy_for_every_other_tick(self) -> None:
        token = self.running()
        self.overlap.claim_next("job", fire_time=T2, lease=LONG)
        assert self.store.release("job", token=token)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T3).status is AcquireStatus.BUSY
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=None).status is AcquireStatus.BUSY

    def test_the_buffered_tick_takes_the_released_lock_once_and_empties_the_slot(self) -> None:
        token = self.running()
        self.overlap.claim_next("job", fire_time=T2, lease=LONG)
        assert self.store.release("job", token=token)
        won = self.store.acquire("job", owner="C", lease=LONG, fire_time=T2)
        assert won.acquired and won.token is not None
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T2).status is AcquireStatus.ALREADY_RAN
        assert self.store.release("job", token=won.token)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T3).acquired

    def test_a_taken_tick_cannot_take_the_slot(self) -> None:
        self.running()
        assert not self.overlap.claim_next("job", fire_time=T1, lease=LONG)
        assert self.overlap.claim_next("job", fire_time=T2, lease=LONG)

    def test_a_dead_slot_no_longer_holds_back_other_ticks(self) -> None:
        token = self.running()
        assert self.overlap.claim_next("job", fire_time=T2, lease=timedelta(milliseconds=1))
        assert self.store.release("job", token=token)
        now = self.store.now()
        while self.store.now() < now + timedelta(milliseconds=20):  # the store's clock past the slot's lease
            pass
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T3).acquired

    def test_buffering_does_not_ask_the_holder_to_stop(self) -> None:
        token = self.running()
        self.overlap.claim_next("job", fire_time=T2, lease=LONG)
        assert self.overlap.renew_watching("job", token=token, lease=LONG) is Renewal.RENEWED

    def test_replacing_asks_the_holder_to_stop_and_renews_its_lease(self) -> None:
        token = self.running()
        assert self.overlap.claim_next("job", fire_time=T2, lease=LONG, replace=True)
        assert self.overlap.renew_watching("job", token=token, lease=LONG) is Renewal.STOP
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T2).status is AcquireStatus.BUSY

    def test_a_later_tick_replaces_an_earlier_one_in_the_slot(self) -> None:
        token = self.running()
        assert self.overlap.claim_next("job", fire_time=T2, lease=LONG, replace=True)
        assert self.overlap.claim_next("job", fire_time=T3, lease=LONG, replace=True)
        assert not self.overlap.claim_next("job", fire_time=T2, lease=LONG, replace=True)
        assert self.store.release("job", token=token)
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T2).status is AcquireStatus.BUSY
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=T3).acquired

    def test_the_stop_request_is_for_the_asked_holder_only(self) -> None:
        token = self.running()
        self.overlap.claim_next("job", fire_time=T2, lease=LONG, replace=True)
        assert self.store.release("job", token=token)
        won = self.store.acquire("job", owner="B", lease=LONG, fire_time=T2)
        assert won.token is not None
        assert self.overlap.renew_watching("job", token=won.token, lease=LONG) is Renewal.RENEWED

    def test_renew_watching_a_lost_token_is_lost(self) -> None:
        token = self.running()
        assert self.store.release("job", token=token)
        assert self.overlap.renew_watching("job", token=token, lease=LONG) is Renewal.LOST

    def test_a_missing_document_refuses_the_slot(self) -> None:
        assert not self.overlap.claim_next("nobody", fire_time=T2, lease=LONG)
