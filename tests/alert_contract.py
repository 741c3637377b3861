"""The alerts part of the lock store contract: the last outcome a release writes, the document's creation time,
incidents that exactly one caller opens, turns into another kind, and closes; and the incident rules of
:mod:`mutexcron.ops.alerts` on top of them (one incident per missed tick, the latest condition told once).

Mixed into :class:`tests.contract.VerbsContract`, the verbs built once on the primitives and proven on the memory store.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, mutex_cron
from mutexcron.ops.alerts import Alert, Alerts
from mutexcron.stores import LockState, LockStore
from tests.support import wait_until

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
SLACK = timedelta(seconds=1)  # store clocks in whole milliseconds, read back by other calls
SECOND, MINUTE = timedelta(seconds=1), timedelta(minutes=1)


class Watch:
    """One instance's alerts for a per-minute job overdue as soon as a tick passes unrun, judged by hand at
    chosen moments (ticks are in the store's near future; runs and incidents happen on its real clock)."""

    def __init__(self, store: LockStore, instance_id: str = "A") -> None:
        self.store, self.registry = store, Registry()
        self.told: list[Alert] = []
        mutex_cron("* * * * *", name="job", registry=self.registry, alert_after=timedelta(0))(lambda: None)
        self.alerts = Alerts(store, instance_id=lambda: instance_id, misfire_grace_time=timedelta(0),
                             notify=lambda alert, event: self.told.append(alert), overdue=lambda name, flag: None)

    def first_tick(self) -> datetime:
        """The job's first tick after its lock document was made (seeded here)."""
        self.store.seed(["job"])
        state = self.store.lock("job")
        assert state is not None and state.created_at is not None
        tick = self.registry.get("job").trigger(UTC).next_after(state.created_at)
        assert tick is not None
        return tick

    def check(self, now: datetime) -> None:
        """What a scheduler does at each sync: judge from the documents just read."""
        states = {state.name: state for state in self.store.locks()}
        self.alerts.check(self.registry, states, lambda job: job.trigger(UTC), now)

    def events(self) -> list[str]:
        return [alert.event for alert in self.told]


class AlertsContract:
    """What alerts read from one lock document: written by the release that already happens."""

    store: LockStore

    def alert_state(self, name: str = "job") -> LockState:
        state = self.store.lock(name)
        assert state is not None
        return state

    def run(self, outcome: str | None, *, fire_time: datetime | None = TICK, error: str | None = None,
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

    def after_the_incident_opened(self) -> None:
        """Wait until the store's clock has passed the open incident's opening by a millisecond, the resolution of
        the stores' stamps (a run then is stamped after it, not in the same millisecond)."""
        opened = self.alert_state().incident_at
        assert opened is not None
        wait_until(lambda: self.store.now() >= opened + timedelta(milliseconds=1), timeout=5,
                   what="the store clock to pass the incident")

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

    def test_only_a_call_naming_the_open_incident_replaces_it(self) -> None:
        self.store.seed(["job"])
        assert not self.store.open_incident("job", "failing since 07:00", replacing="overdue since 06:00")
        self.store.open_incident("job", "overdue since 06:00")
        before = self.store.now()
        assert not self.store.open_incident("job", "failing since 07:00", replacing="overdue since 05:00")
        assert self.alert_state().incident == "overdue since 06:00"
        assert self.store.open_incident("job", "failing since 07:00", replacing="overdue since 06:00")
        state = self.alert_state()
        assert state.incident == "failing since 07:00"
        assert state.incident_at is not None and state.incident_at >= before - SLACK  # opened anew
        assert not self.store.open_incident("job", "failing since 08:00", replacing="overdue since 06:00")

    def test_racing_replacements_of_an_incident_replace_it_exactly_once(self) -> None:
        self.store.seed(["job"])
        self.store.open_incident("job", "overdue since 06:00")
        results = self.concurrently(
            lambda: self.store.open_incident("job", "failing since 07:00", replacing="overdue since 06:00"), 8)
        assert sorted(results) == [False] * 7 + [True]
        assert self.alert_state().incident == "failing since 07:00"

    def test_incidents_on_a_missing_or_deleted_document_change_nothing(self) -> None:
        assert not self.store.open_incident("nobody", "overdue since 06:00")
        assert self.store.lock("nobody") is None
        self.store.seed(["job"])
        self.store.open_incident("job", "overdue since 06:00")
        self.store.delete("job")
        assert not self.store.open_incident("job", "failing since 07:00", replacing="overdue since 06:00")
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
        with pytest.raises(ValueError, match="incident"):
            self.store.open_incident("job", "failing since 07:00", replacing=incident)
        assert self.alert_state().incident is None

    def test_an_incident_survives_runs_and_releases(self) -> None:
        self.store.seed(["job"])
        self.store.open_incident("job", "failing since 07:00")
        self.run("succeeded")
        assert self.alert_state().incident == "failing since 07:00"  # closing it is the alert's to do, once

    # -- the incident rules (mutexcron.ops.alerts): one incident per missed tick, the latest condition --------------

    def test_a_manual_run_does_not_recover_an_overdue_job_and_its_missed_tick_raises_one_incident(self) -> None:
        watch = Watch(self.store)
        tick = watch.first_tick()
        watch.check(tick + SECOND)
        assert watch.events() == ["overdue"], watch.events()
        self.after_the_incident_opened()
        assert self.run("succeeded", fire_time=None)  # run_now: it takes no tick, so the schedule still missed one
        watch.alerts.succeeded("job", tick + SECOND)
        for moment in (2, 3, 4):
            watch.check(tick + moment * SECOND)
        assert watch.events() == ["overdue"], watch.events()
        assert (self.alert_state().incident or "").startswith(f"overdue since {tick.isoformat()}")
        assert self.run("succeeded", fire_time=tick)  # the missed tick itself, run late
        watch.check(tick + 5 * SECOND)
        watch.check(tick + 6 * SECOND)
        assert watch.events() == ["overdue", "recovered"], watch.events()
        assert self.alert_state().incident is None

    def test_an_overdue_incident_stays_open_until_no_tick_is_missed(self) -> None:
        watch = Watch(self.store)
        tick = watch.first_tick()
        now = tick + 2 * MINUTE + SECOND  # three ticks missed
        watch.check(now)
        self.after_the_incident_opened()
        assert self.run("succeeded", fire_time=tick)  # the first caught up; the next two still missed
        watch.alerts.succeeded("job", now)
        watch.check(now)
        assert watch.events() == ["overdue"], watch.events()
        assert self.run("succeeded", fire_time=tick + 2 * MINUTE)
        watch.alerts.succeeded("job", now)
        watch.check(now)
        assert watch.events() == ["overdue", "recovered"], watch.events()

    def test_a_failed_run_while_overdue_turns_the_incident_into_failing_with_one_alert(self) -> None:
        watch = Watch(self.store)
        tick = watch.first_tick()
        watch.check(tick + SECOND)
        assert self.run("failed", fire_time=tick, error="ValueError: the upstream is down")
        watch.check(tick + 2 * SECOND)
        watch.check(tick + 3 * SECOND)
        assert watch.events() == ["overdue", "failing"], watch.events()
        failing = watch.told[1]
        assert failing.kind == "failing" and failing.problem is not None
        assert failing.problem.detail == "ValueError: the upstream is down"
        assert self.alert_state().incident == failing.incident
        assert self.run("failed", fire_time=tick + MINUTE, error="ValueError: still down")
        watch.check(tick + MINUTE + SECOND)
        assert watch.events() == ["overdue", "failing"] and self.alert_state().incident == failing.incident
        self.after_the_incident_opened()
        assert self.run("succeeded", fire_time=tick + 2 * MINUTE)
        watch.check(tick + 2 * MINUTE + SECOND)
        assert watch.events() == ["overdue", "failing", "recovered"], watch.events()
        assert watch.told[2].incident == failing.incident and self.alert_state().incident is None

    def test_a_tick_missed_while_failing_keeps_it_failing_until_a_success_turns_it_into_overdue(self) -> None:
        watch = Watch(self.store)
        tick = watch.first_tick()
        assert self.run("failed", fire_time=tick, error="ValueError: boom")
        watch.check(tick + SECOND)
        watch.check(tick + MINUTE + SECOND)  # the next tick passed unrun too: the failed run is the newer news
        assert watch.events() == ["failing"], watch.events()
        self.after_the_incident_opened()
        assert self.run("succeeded", fire_time=None)  # run_now: the body works again, the tick is still missed
        watch.alerts.succeeded("job", tick + MINUTE + 2 * SECOND)
        watch.check(tick + MINUTE + 3 * SECOND)
        assert watch.events() == ["failing", "overdue"], watch.events()
        assert (self.alert_state().incident or "").startswith(f"overdue since {(tick + MINUTE).isoformat()}")
        self.after_the_incident_opened()
        assert self.run("succeeded", fire_time=tick + MINUTE)
        watch.check(tick + MINUTE + 4 * SECOND)
        assert watch.events() == ["failing", "overdue", "recovered"], watch.events()

    def test_racing_instances_turn_an_overdue_incident_into_failing_once(self) -> None:
        fleet = [Watch(self.store, f"i{n}") for n in range(4)]
        tick = fleet[0].first_tick()
        for watch in fleet:
            watch.check(tick + SECOND)
        assert self.run("failed", fire_time=tick, error="ValueError: boom")

        def check(watch: Watch) -> None:
            watch.check(tick + 2 * SECOND)

        self.run_together(check, [(watch,) for watch in fleet])  # type: ignore[attr-defined]
        told = sorted(event for watch in fleet for event in watch.events())
        assert told == ["failing", "overdue"], told
        assert (self.alert_state().incident or "").startswith("failing since")
