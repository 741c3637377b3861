"""The control plane's three primitives (:class:`mutexcron.stores.ControlStore`: read, locks, write), which every
store with it implements and on which every control verb is built once (mutexcron.stores.changes): a
compare-and-set write on a revision that every write of the store bumps.
"""

from __future__ import annotations

import threading
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from mutexcron.stores import ControlStore, LockState, LockStore
from tests.document_contract import FIRE_1, FIRE_2, LONG

AT = datetime(2026, 5, 4, 3, 2, 1, 123000, tzinfo=UTC)  # whole milliseconds: the finest time every store keeps


class ControlPrimitivesContract:
    """read, locks and write, and the revision that makes write a compare-and-set."""

    store: LockStore

    @property
    def documents(self) -> ControlStore:
        assert isinstance(self.store, ControlStore)
        return self.store

    def revision(self, name: str) -> int:
        state = self.documents.read(name)
        assert state is not None
        return state.revision

    def test_read_gives_none_for_a_missing_document_and_a_seeded_one_unwritten(self) -> None:
        assert self.documents.read("job") is None
        self.store.seed(["job"])
        state = self.documents.read("job")
        assert state is not None and state.name == "job" and not state.locked and not state.deleted
        assert state.token == 0 and state.created_at is not None

    def test_write_with_revision_zero_creates_a_missing_document(self) -> None:
        made = LockState("job", False, None, None, None, None, None, 0, created_at=AT, schedule="0 6 * * *")
        assert self.documents.write(made, revision=0)
        state = self.documents.read("job")
        assert state is not None and state.schedule == "0 6 * * *" and state.revision == 1
        assert [state.name for state in self.documents.locks()] == ["job"]

    def test_a_write_at_another_revision_is_refused_and_changes_nothing(self) -> None:
        self.store.seed(["job"])
        state = self.documents.read("job")
        assert state is not None
        assert self.documents.write(replace(state, failures=1), revision=state.revision)
        assert not self.documents.write(replace(state, failures=7), revision=state.revision)
        after = self.documents.read("job")
        assert after is not None and after.failures == 1 and after.revision == state.revision + 1

    def test_every_write_of_the_lock_bumps_the_revision_and_a_refusal_does_not(self) -> None:
        self.store.seed(["job"])
        seen = [self.revision("job")]
        held = self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1)
        assert held.token is not None
        seen.append(self.revision("job"))
        assert not self.store.acquire("job", owner="B", lease=LONG, fire_time=FIRE_2).acquired
        assert self.revision("job") == seen[-1]
        assert self.store.renew("job", token=held.token, lease=LONG)
        seen.append(self.revision("job"))
        assert self.store.release("job", token=held.token, outcome="succeeded")
        seen.append(self.revision("job"))
        assert self.store.delete("job") and self.store.seed(["job"]) == 1
        seen.append(self.revision("job"))
        assert all(later > earlier for earlier, later in pairwise(seen))

    def test_a_control_write_computed_before_an_acquire_is_refused(self) -> None:
        self.store.seed(["job"])
        before = self.documents.read("job")
        assert before is not None
        assert self.store.acquire("job", owner="A", lease=LONG, fire_time=FIRE_1).acquired
        assert not self.documents.write(replace(before, paused=True), revision=before.revision)
        state = self.documents.read("job")
        assert state is not None and state.locked and not state.paused

    def test_read_shows_a_deleted_document_that_lock_and_locks_hide(self) -> None:
        self.store.seed(["job", "kept"])
        assert self.documents.delete("job")
        state = self.documents.read("job")
        assert state is not None and state.deleted
        assert self.documents.lock("job") is None
        assert [state.name for state in self.documents.locks()] == ["kept"]

    def test_write_keeps_every_field_as_read_gives_it_back(self) -> None:
        self.store.seed(["job"])
        seeded = self.documents.read("job")
        assert seeded is not None
        every = replace(
            seeded, locked=True, locked_by="A", last_locked_at=AT, last_released_at=AT - timedelta(hours=1),
            lock_until=AT + LONG, last_fire_time=FIRE_1, token=7, tick_token=6, paused=True, paused_at=AT,
            paused_until=AT + timedelta(days=1), paused_by="ops", pause_note="a note", resumed_at=AT - LONG,
            schedule="*/5 * * * *", schedule_timezone="Europe/Paris", schedule_version=3, schedule_by="ops",
            schedule_changed_at=AT, created_at=AT - timedelta(days=2), last_outcome="failed", last_finished_at=AT,
            last_success_at=AT - timedelta(days=1), last_error="ValueError: boom", failures=2,
            incident="failing 2 runs", incident_at=AT, definition='{"spec": "* * * * *"}', next_fire=FIRE_2,
            next_until=AT + LONG, stop_token=7)
        assert self.documents.write(every, revision=seeded.revision)
        state = self.documents.read("job")
        assert state is not None
        assert {field.name: getattr(state, field.name) for field in fields(LockState) if field.name != "revision"} \
            == {field.name: getattr(every, field.name) for field in fields(LockState) if field.name != "revision"}
        assert state.revision == seeded.revision + 1

    def test_concurrent_updates_each_count_once(self) -> None:
        self.store.seed(["job"])
        threads, each = 4, 5

        def fail() -> None:
            for _ in range(each):
                self.documents.record_failure("job")

        workers = [threading.Thread(target=fail) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        state = self.documents.lock("job")
        assert state is not None and state.failures == threads * each
