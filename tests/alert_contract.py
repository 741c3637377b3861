"""The alerts part of the lock store contract: the last outcome a release writes, the document's creation time,
and incidents that exactly one caller opens and exactly one closes.

Mixed into :class:`tests.contract.LockStoreContract`, so every store runs it against its real server.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron.stores import LockState, LockStore

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
SLACK = timedelta(seconds=1)  # store clocks in whole milliseconds, read back by other calls


class AlertsContract:
    """What alerts read from one lock document: written by the release that already happens."""

    store: LockStore

    def alert_state(self, name: str = "job") -> LockState:
        state = self.store.lock(name)
        assert state is not None
        return state

    def run(self, outcome: str | None, *, fire_time: datetime = TICK, error: str | None = None,
            hold_at_least: timedelta = timedelta(0)) -> bool:
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=fire_time)
        assert acquisition.token is not None
        return self.store.release("job", token=acquisition.token, hold_at_least=hold_at_least, outcome=outcome,
                                  error=error)

    def concurrently(self, call: object, count: int) -> list[bool]:
        results: list[bool] = []
        lock = threading.Lock()

        def one() -> None:
            result = call()  # type: ignore[operator]
            with lock:
                results.append(result)

        self.run_together(one, [()] * count)  # type: ignore[attr-defined]
        return results

    # -- created_at --------------------------------------------------------------------------------

    def test_a_seeded_document_knows_when_it_was_created_and_has_no_outcome(self) -> None:
        before = self.store.now()
        self.store.seed(["job"])
        state = self.alert_state()
        assert state.created_at is not None and before - SLACK <= state.created_at <= self.store.now() + SLACK
        assert state.last_outcome is None and state.last_success_at is None and state.last_finished_at is None
        assert state.last_error is None and state.incident is None and state.incident_at is None

    def test_a_document_made_by_acquire_knows_when_it_was_created(self) -> None:
        self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        assert self.alert_state().created_at is not None

    def test_created_at_survives_a_delete_and_a_reseed(self) -> None:
        self.store.seed(["job"])
        created = self.alert_state().created_at
        self.store.delete("job")
        self.store.seed(["job"])
        assert self.alert_state().created_at == created

    # -- the last outcome ------------------------------------------------------------------------------

    def test_a_succeeded_release_records_the_outcome_and_the_success_time(self) -> None:
        before = self.store.now()
        assert self.run("succeeded")
        state = self.alert_state()
        assert state.last_outcome == "succeeded" and state.last_error is None
        assert state.last_success_at is not None and state.last_success_at == state.last_finished_at
        assert before - SLACK <= state.last_success_at <= self.store.now() + SLACK
        assert not state.locked

    def test_a_failed_release_keeps_the_last_success_and_records_the_error_line(self) -> None:
        self.run("succeeded")
        succeeded_at = self.alert_state().last_success_at
        traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
        assert self.run("failed", fire_time=TICK + timedelta(days=1), error=traceback)
        state = self.alert_state()
        assert state.last_outcome == "failed" and state.last_error == "ValueError: boom"
        assert state.last_success_at == succeeded_at
        assert state.last_finished_at is not None and succeeded_at is not None
        assert state.last_finished_at >= succeeded_at

    def test_a_long_error_is_kept_as_one_clipped_line(self) -> None:
        self.run("failed", error="RuntimeError: " + "é" * 2000)
        error = self.alert_state().last_error
        assert error is not None and error.startswith("RuntimeError: ") and len(error) <= 500

    def test_a_release_without_an_outcome_leaves_the_last_outcome_as_it_was(self) -> None:
        self.run("failed", error="ValueError: boom")
        self.run(None, fire_time=TICK + timedelta(days=1))
        state = self.alert_state()
        assert state.last_outcome == "failed" and state.last_error == "ValueError: boom"

    def test_the_outcome_is_recorded_while_hold_at_least_keeps_the_lock(self) -> None:
        self.run("succeeded", hold_at_least=LONG)
        state = self.alert_state()
        assert state.last_outcome == "succeeded" and state.locked

    def test_a_stale_release_records_no_outcome(self) -> None:
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        assert acquisition.token is not None
        assert not self.store.release("job", token=acquisition.token + 1, outcome="failed", error="X: y")
        state = self.alert_state()
        assert state.last_outcome is None and state.last_error is None and state.locked

    def test_an_unknown_outcome_is_a_value_error_and_changes_nothing(self) -> None:
        acquisition = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        assert acquisition.token is not None
        with pytest.raises(ValueError, match="'skipped_busy'"):
            self.store.release("job", token=acquisition.token, outcome="skipped_busy")
        assert self.alert_state().locked

    # -- incidents ------------------------------------------------------------------------------------

    def test_only_the_first_open_of_an_incident_opens_it(self) -> None:
        self.store.seed(["job"])
        before = self.store.now()
        assert self.store.open_incident("job", "overdue since 06:00")
        assert not self.store.open_incident("job", "overdue since 06:00")
        assert not self.store.open_incident("job", "failing since 07:00")
        state = self.alert_state()
        assert state.incident == "overdue since 06:00"
        assert state.incident_at is not None and state.incident_at >= before - SLACK

    def test_racing_opens_of_an_incident_open_it_exactly_once(self) -> None:
        self.store.seed(["job"])
        results = self.concurrently(lambda: self.store.open_incident("job", "overdue since 06:00"), 8)
        assert sorted(results) == [False] * 7 + [True]

    def test_only_a_close_naming_the_open_incident_closes_it(self) -> None:
        self.store.seed(["job"])
        self.store.open_incident("job", "overdue since 06:00")
        assert not self.store.close_incident("job", "overdue since 05:00")
        assert self.alert_state().incident == "overdue since 06:00"
        assert self.store.close_incident("job", "overdue since 06:00")
        state = self.alert_state()
        assert state.incident is None and state.incident_at is None
        assert not self.store.close_incident("job", "overdue since 06:00")

    def test_racing_closes_of_an_incident_close_it_exactly_once(self) -> None:
        self.store.seed(["job"])
        self.store.open_incident("job", "failing since 07:00")
        results = self.concurrently(lambda: self.store.close_incident("job", "failing since 07:00"), 8)
        assert sorted(results) == [False] * 7 + [True]

    def test_a_closed_incident_can_be_followed_by_a_new_one(self) -> None:
        self.store.seed(["job"])
        self.store.open_incident("job", "overdue since 06:00")
        self.store.close_incident("job", "overdue since 06:00")
        assert self.store.open_incident("job", "failing since 07:00")

    def test_incidents_on_a_missing_or_deleted_document_change_nothing(self) -> None:
        assert not self.store.open_incident("nobody", "overdue since 06:00")
        assert self.store.lock("nobody") is None
        self.store.seed(["job"])
        self.store.delete("job")
        assert not self.store.open_incident("job", "overdue since 06:00")
        assert not self.store.close_incident("job", "overdue since 06:00")
        assert self.store.lock("job") is None

    @pytest.mark.parametrize("incident", ["", "x" * 256])
    def test_an_empty_or_too_long_incident_is_a_value_error_and_changes_nothing(self, incident: str) -> None:
        self.store.seed(["job"])
        with pytest.raises(ValueError, match="incident"):
            self.store.open_incident("job", incident)
        with pytest.raises(ValueError, match="incident"):
            self.store.close_incident("job", incident)
        assert self.alert_state().incident is None

    def test_an_incident_survives_runs_and_releases(self) -> None:
        self.store.seed(["job"])
        self.store.open_incident("job", "failing since 07:00")
        self.run("succeeded")
        assert self.alert_state().incident == "failing since 07:00"  # closing it is the alert's to do, once
