"""The pause note and the failure streak of the control plane: ``pause(note=)`` keeps an operator's note until
``resume``; ``record_failure`` counts failed runs in a row (a succeeded release resets the count) and, with
``pause_after``, pauses the job once, whichever instances count at the same time; and ``pause_on_failure``, which
pauses a job through it after its failed runs in a row, with one ``"paused"`` alert.

Mixed into :class:`tests.contract.VerbsContract`, the verbs built once on the primitives and proven on the memory store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, Scheduler, mutex_cron
from mutexcron.ops.alerts import Alert
from mutexcron.records import Outcome
from mutexcron.stores import ControlStore, LockState, LockStore
from mutexcron.stores.base import MAX_PAUSE_NOTE

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
BY = "mutexcron:pause_on_failure"


class PauseContract:
    """What a store keeps of a pause's note and of a job's failed runs in a row."""

    store: LockStore
    run_together: Callable[..., None]

    @property
    def controlled(self) -> ControlStore:
        assert isinstance(self.store, ControlStore)
        return self.store

    def state(self, name: str = "job") -> LockState:
        state = self.controlled.lock(name)
        assert state is not None
        return state

    def released(self, outcome: str, fire_time: datetime = TICK) -> None:
        """One run of "job" released with ``outcome``."""
        won = self.store.acquire("job", owner="A", lease=LONG, fire_time=fire_time)
        assert won.token is not None
        assert self.store.release("job", token=won.token, outcome=outcome, error="boom" if outcome != "succeeded"
                                  else None)

    def test_pause_keeps_the_operators_note_until_resume(self) -> None:
        self.store.seed(["job"])
        note = "the billing API is down (INC-4411); résumé after the vendor's fix ✓"
        paused = self.controlled.pause("job", by="alice", note=note)
        assert paused is not None and paused.pause_note == note and self.state().pause_note == note
        resumed = self.controlled.resume("job")
        assert resumed is not None and resumed.pause_note is None and self.state().pause_note is None

    def test_a_pause_without_a_note_has_none(self) -> None:
        self.store.seed(["job"])
        assert self.controlled.pause("job", by="alice", note="first") is not None
        assert self.controlled.pause("job", by="bob") is not None
        assert self.state().pause_note is None and self.state().paused_by == "bob"

    @pytest.mark.parametrize("note", ["x" * (MAX_PAUSE_NOTE + 1), 42], ids=["too-long", "not-text"])
    def test_a_note_a_store_cannot_keep_is_refused_changing_nothing(self, note: object) -> None:
        self.store.seed(["job"])
        with pytest.raises(ValueError, match="pause note"):
            self.controlled.pause("job", note=note)  # type: ignore[arg-type]
        assert not self.state().paused

    def test_a_note_of_the_longest_length_is_kept_whole(self) -> None:
        self.store.seed(["job"])
        self.controlled.pause("job", note="n" * MAX_PAUSE_NOTE)
        assert self.state().pause_note == "n" * MAX_PAUSE_NOTE

    def test_failed_runs_in_a_row_are_counted_and_a_success_resets_them(self) -> None:
        self.store.seed(["job"])
        assert self.state().failures == 0
        for n in range(1, 4):
            self.released("failed", TICK + n * timedelta(minutes=1))
            assert self.controlled.record_failure("job") == (n, False)
        assert self.state().failures == 3
        self.released("succeeded", TICK + timedelta(minutes=10))
        assert self.state().failures == 0
        assert self.controlled.record_failure("job") == (1, False)

    def test_a_timed_out_or_replaced_release_does_not_reset_the_count(self) -> None:
        self.store.seed(["job"])
        self.controlled.record_failure("job")
        self.released("timed_out", TICK)
        self.released("replaced", TICK + timedelta(minutes=1))
        assert self.state().failures == 1

    def test_the_count_reaching_pause_after_pauses_the_job_with_its_note(self) -> None:
        self.store.seed(["job"])
        assert self.controlled.record_failure("job", pause_after=2, by=BY, note="2 failed runs in a row") == (1, False)
        assert not self.state().paused
        assert self.controlled.record_failure("job", pause_after=2, by=BY, note="2 failed runs in a row") == (2, True)
        state = self.state()
        assert state.is_paused(self.store.now()) and state.paused_by == BY
        assert state.pause_note == "2 failed runs in a row" and state.paused_until is None

    def test_a_paused_job_is_not_paused_again_by_its_count(self) -> None:
        self.store.seed(["job"])
        self.controlled.pause("job", by="alice", note="mine")
        assert self.controlled.record_failure("job", pause_after=1, by=BY, note="auto") == (1, False)
        assert self.state().paused_by == "alice" and self.state().pause_note == "mine"

    def test_a_pause_whose_until_passed_is_no_pause_for_the_count(self) -> None:
        self.store.seed(["job"])
        self.controlled.pause("job", until=self.store.now() - timedelta(seconds=1), by="alice")
        assert self.controlled.record_failure("job", pause_after=1, by=BY) == (1, True)
        assert self.state().paused_by == BY and self.state().paused_until is None

    def test_one_of_many_counts_at_once_pauses_the_job(self) -> None:
        self.store.seed(["job"])
        answers: list[tuple[int, bool]] = []
        self.run_together(lambda: answers.append(self.controlled.record_failure("job", pause_after=3, by=BY)),
                          [()] * 8)
        assert sorted(count for count, _ in answers) == list(range(1, 9))
        assert [paused for _, paused in answers].count(True) == 1
        assert self.state().failures == 8 and self.state().paused_by == BY

    def test_counting_a_job_without_a_document_changes_nothing(self) -> None:
        assert self.controlled.record_failure("nobody", pause_after=1) == (0, False)
        assert self.controlled.lock("nobody") is None

    # -- pause_on_failure through the scheduler --------------------------------------------------------------

    def _two_schedulers(self, registry: Registry, alerts: list[Alert]) -> list[Scheduler]:
        schedulers = [Scheduler(self.store, registry=registry, instance_id=name) for name in ("first", "second")]
        for scheduler in schedulers:
            scheduler.add_listener(alerts.append, events=["paused"])
        return schedulers

    def test_a_job_pauses_itself_after_its_failed_runs_in_a_row_with_one_alert(self) -> None:
        registry, alerts, ticks = Registry(), list[Alert](), [TICK + n * timedelta(minutes=1) for n in range(4)]

        def body() -> None:
            raise RuntimeError("the warehouse API answered 503")

        mutex_cron("* * * * *", name="job", registry=registry, pause_on_failure=3)(body)
        first, second = self._two_schedulers(registry, alerts)
        try:
            outcomes = [(first if n % 2 else second).run_tick("job", tick).outcome for n, tick in enumerate(ticks)]
        finally:
            first.shutdown()
            second.shutdown()
        assert outcomes == [Outcome.FAILED, Outcome.FAILED, Outcome.FAILED, Outcome.SKIPPED_PAUSED]
        state = self.state()
        assert state.is_paused(self.store.now()) and state.paused_by == BY and state.failures == 3
        assert state.pause_note is not None and "3 failed runs in a row" in state.pause_note
        assert "the warehouse API answered 503" in state.pause_note
        assert [(alert.job_name, alert.event, alert.kind) for alert in alerts] == [("job", "paused", "paused")]

    def test_a_success_between_failures_starts_the_count_again(self) -> None:
        registry, alerts, fail = Registry(), list[Alert](), [True, True, False, True, True]

        def body() -> None:
            if fail.pop(0):
                raise RuntimeError("flaky")

        mutex_cron("* * * * *", name="job", registry=registry, pause_on_failure=3)(body)
        first, second = self._two_schedulers(registry, alerts)
        try:
            for n in range(5):
                first.run_tick("job", TICK + n * timedelta(minutes=1))
        finally:
            first.shutdown()
            second.shutdown()
        assert not self.state().paused and self.state().failures == 2 and alerts == []

    def test_a_timed_out_run_counts_as_a_failure(self) -> None:
        registry, alerts = Registry(), list[Alert]()
        mutex_cron("* * * * * *", name="job", registry=registry, lease=5, timeout=0.1, pause_on_failure=1)(
            lambda ctx: ctx.cancelled.wait(10))
        first, second = self._two_schedulers(registry, alerts)
        try:
            assert first.run_tick("job", TICK).outcome is Outcome.TIMED_OUT
        finally:
            first.shutdown()
            second.shutdown()
        assert self.state().paused_by == BY and [alert.event for alert in alerts] == ["paused"]
