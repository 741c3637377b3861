"""The lock documents of a store with the control plane: what lock(), locks(), force_unlock() and delete() show
and do. Mixed into :class:`tests.contract.VerbsContract`, the verbs built once on the primitives and proven on
the memory store.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mutexcron.stores import AcquireStatus, LockStore
from tests.support import wait_until

LONG = timedelta(seconds=30)
FIRE_1 = datetime(2026, 1, 1, 6, 0, 0, tzinfo=UTC)
FIRE_2 = FIRE_1 + timedelta(days=1)


class DocumentContract:
    """Lock documents as a store with the control plane keeps them, and the operators' unlock and delete."""

    store: LockStore  # a ControlStore too, set by the subclass's autouse fixture

    # -- operator actions ---------------------------------------------------------------------

    def test_force_unlock_frees_a_held_lock_and_fences_off_its_holder(self) -> None:
        held = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert held.token is not None
        assert self.store.force_unlock("job")
        assert not self.store.force_unlock("job")
        assert not self.store.renew("job", token=held.token, lease=LONG)
        taken = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert taken.acquired
        assert not self.store.release("job", token=held.token)

    # -- deleting: the document is hidden, its token, last fire and live lease are kept --------

    def test_delete_hides_the_document_from_lock_and_locks(self) -> None:
        self.store.seed(["orphan", "kept"])
        assert self.store.delete("orphan")
        assert self.store.lock("orphan") is None
        assert [state.name for state in self.store.locks()] == ["kept"]
        assert not self.store.delete("orphan")

    def test_a_token_is_never_issued_twice_across_a_delete(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert first.token is not None and self.store.release("job", token=first.token)
        assert self.store.delete("job")
        again = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert again.acquired and again.token is not None and again.token > first.token
        state = self.store.lock("job")
        assert state is not None and state.locked_by == "B"

    def test_a_token_is_never_issued_twice_across_a_delete_and_a_reseed(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert first.token is not None and self.store.release("job", token=first.token)
        assert self.store.delete("job")
        assert self.store.seed(["job"]) == 1
        again = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert again.acquired and again.token is not None and again.token > first.token

    def test_a_tick_that_ran_is_already_ran_after_a_delete(self) -> None:
        first = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert first.token is not None and self.store.release("job", token=first.token)
        assert self.store.delete("job")
        assert self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_1).status is AcquireStatus.ALREADY_RAN

    def test_a_live_lease_survives_a_delete(self) -> None:
        self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert self.store.delete("job")
        busy = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert busy.status is AcquireStatus.BUSY and busy.holder == "A"

    def test_the_holder_renews_and_releases_after_a_delete(self) -> None:
        held = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert held.token is not None
        assert self.store.delete("job")
        assert self.store.renew("job", token=held.token, lease=LONG)
        assert self.store.release("job", token=held.token)
        taken = self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2)
        assert taken.acquired and taken.token is not None and taken.token > held.token

    def test_a_stale_holder_is_fenced_off_across_a_delete(self) -> None:
        stale = self.store.acquire("job", owner="A", lease=timedelta(milliseconds=200), fire_time=FIRE_1)
        assert stale.token is not None
        assert self.store.delete("job")
        assert wait_until(lambda: self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).acquired)
        taken = self.store.lock("job")
        assert taken is not None and taken.locked_by == "B" and taken.token > stale.token
        assert not self.store.renew("job", token=stale.token, lease=LONG)
        assert not self.store.release("job", token=stale.token)
        assert self.store.acquire("job", owner="C", lease=LONG, fire_time=None).status is AcquireStatus.BUSY

    def test_times_read_back_are_aware_utc(self) -> None:
        self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        state = self.store.lock("job")
        assert state is not None
        for value in (state.last_locked_at, state.lock_until, state.last_fire_time):
            assert value is not None and value.utcoffset() == timedelta(0)

    def test_a_fresh_lease_starts_now_on_the_store_clock(self) -> None:
        """So a live lock never reads as expired (or as held for hours), whatever a server's time zone."""
        before = self.store.now()
        self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        after = self.store.now()
        state = self.store.lock("job")
        assert state is not None and state.last_locked_at is not None
        assert before - timedelta(seconds=1) <= state.last_locked_at <= after + timedelta(seconds=1)
