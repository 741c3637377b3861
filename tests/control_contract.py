"""The run-time control part of the lock store contract: pause, resume, schedule overrides and their version, and
run-time schedules' definitions.

Mixed into :class:`tests.contract.VerbsContract`, the verbs built once on the primitives and proven on the memory store.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import CronSpecError, Registry, mutex_cron
from mutexcron.ops import control
from mutexcron.stores import AcquireStatus, Acquisition, LockState, LockStore
from mutexcron.stores.base import MAX_DEFINITION, check_definition
from tests.batch_contract import request, statuses
from tests.support import wait_until

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
DEFINITION = '{"spec": "*/5 * * * *", "target": "reports.send", "kwargs": {"to": "ops"}}'


class FleetControlContract:
    """Pause, resume and schedule overrides, decided by the store's atomic acquire."""

    store: LockStore

    def state(self, name: str = "job") -> LockState:
        state = self.store.lock(name)
        assert state is not None
        return state

    def acquire(self, fire_time: datetime | None = TICK, *, version: int | None = None, name: str = "job",
                owner: str = "A") -> AcquireStatus:
        return self.store.acquire(name, owner=owner, lease=LONG, fire_time=fire_time,
                                  schedule_version=version).status

    # -- pausing --------------------------------------------------------------------------------

    def test_a_seeded_document_is_not_paused_and_has_no_override(self) -> None:
        self.store.seed(["job"])
        state = self.state()
        assert not state.paused and state.paused_at is None and state.paused_until is None
        assert state.paused_by is None and state.resumed_at is None
        assert state.schedule is None and state.schedule_timezone is None and state.schedule_version == 0
        assert not state.is_paused(self.store.now())

    def test_pause_records_who_since_when_and_until_when(self) -> None:
        self.store.seed(["job"])
        until = (self.store.now() + timedelta(hours=2)).replace(microsecond=0)
        before = self.store.now()
        paused = self.store.pause("job", until=until, by="alice")
        assert paused is not None and paused == self.state()
        assert paused.paused and paused.paused_by == "alice" and paused.paused_until == until
        assert paused.paused_at is not None and paused.paused_at.tzinfo is not None
        assert before - timedelta(seconds=1) <= paused.paused_at <= self.store.now() + timedelta(seconds=1)
        assert paused.is_paused(self.store.now())

    def test_a_paused_job_refuses_a_scheduled_acquire_and_changes_nothing(self) -> None:
        self.store.seed(["job"])
        self.store.pause("job")
        before = self.state()
        assert self.acquire(TICK) is AcquireStatus.PAUSED
        after = self.state()
        assert not after.locked and after.token == before.token and after.last_fire_time is None

    def test_a_paused_job_refuses_a_manual_acquire(self) -> None:
        self.store.seed(["job"])
        self.store.pause("job")
        assert self.acquire(None) is AcquireStatus.PAUSED
        assert not self.state().locked

    def test_pause_does_not_interrupt_a_running_holder(self) -> None:
        acquired = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        assert acquired.token is not None
        self.store.pause("job", by="ops")
        assert self.store.renew("job", token=acquired.token, lease=LONG)
        assert self.store.release("job", token=acquired.token)
        assert not self.state().locked and self.state().paused

    def test_pause_wins_over_already_ran_and_stale_schedule(self) -> None:
        self.store.acquire("job", owner="A", lease=timedelta(milliseconds=1), fire_time=TICK)
        self.store.set_schedule("job", "*/5 * * * *")
        self.store.pause("job")
        assert self.acquire(TICK, version=0) is AcquireStatus.PAUSED

    def test_resume_lets_the_next_tick_run_and_records_when(self) -> None:
        self.store.seed(["job"])
        self.store.pause("job", by="alice")
        resumed = self.store.resume("job")
        assert resumed is not None and resumed == self.state()
        assert not resumed.paused and resumed.paused_by is None and resumed.paused_at is None
        assert resumed.resumed_at is not None and resumed.resumed_at.tzinfo is not None
        assert resumed.pause_ended_at(self.store.now()) == resumed.resumed_at
        assert self.acquire(TICK) is AcquireStatus.ACQUIRED

    def test_resume_of_a_job_that_is_not_paused_changes_nothing(self) -> None:
        self.store.seed(["job"])
        assert self.store.resume("job") == self.state()
        assert self.state().resumed_at is None

    def test_a_pause_with_until_ends_by_itself_on_the_store_clock(self) -> None:
        self.store.seed(["job"])
        until = self.store.now() + timedelta(milliseconds=600)
        self.store.pause("job", until=until)
        assert self.acquire(TICK) is AcquireStatus.PAUSED
        wait_until(lambda: self.store.now() > until + timedelta(milliseconds=5), timeout=5)
        assert self.acquire(TICK) is AcquireStatus.ACQUIRED
        state = self.state()
        assert not state.is_paused(self.store.now())
        ended = state.pause_ended_at(self.store.now())
        assert ended is not None and abs(ended - until) < timedelta(milliseconds=2)

    def test_resuming_a_pause_whose_until_passed_records_that_it_ended_at_until(self) -> None:
        """The ticks between its until and the resume were missed, not paused: catch-up may run them."""
        self.store.seed(["job"])
        until = (self.store.now() - timedelta(minutes=10)).replace(microsecond=0)
        self.store.pause("job", until=until, by="alice")
        resumed = self.store.resume("job")
        assert resumed is not None and not resumed.paused and resumed.paused_until is None
        assert resumed.resumed_at == until
        assert resumed.pause_ended_at(self.store.now()) == until

    def test_resuming_a_pause_whose_until_is_ahead_records_now(self) -> None:
        self.store.seed(["job"])
        until = self.store.now() + timedelta(hours=1)
        before = self.store.now()
        resumed = self.store.pause("job", until=until) and self.store.resume("job")
        assert resumed is not None and resumed.resumed_at is not None
        assert before - timedelta(milliseconds=2) <= resumed.resumed_at <= self.store.now() < until

    def test_pausing_again_replaces_until_and_by(self) -> None:
        self.store.seed(["job"])
        self.store.pause("job", until=self.store.now() + timedelta(hours=1), by="alice")
        again = self.store.pause("job", by="bob")
        assert again is not None and again.paused_by == "bob" and again.paused_until is None

    def test_seeding_keeps_a_pause_and_an_override(self) -> None:
        self.store.seed(["job"])
        self.store.pause("job", by="alice")
        self.store.set_schedule("job", "0 * * * *", timezone="Europe/Paris", by="bob")
        self.store.seed(["job"])
        state = self.state()
        assert state.paused and state.paused_by == "alice"
        assert state.schedule == "0 * * * *" and state.schedule_timezone == "Europe/Paris"

    def test_a_deleted_document_keeps_its_pause_and_a_refused_acquire_leaves_it_deleted(self) -> None:
        self.store.seed(["job"])
        self.store.pause("job")
        self.store.delete("job")
        assert self.acquire(TICK) is AcquireStatus.PAUSED
        assert self.store.lock("job") is None
        self.store.seed(["job"])
        assert self.state().paused

    def test_control_of_a_name_the_store_does_not_know_returns_none_and_creates_nothing(self) -> None:
        assert self.store.pause("nobody") is None
        assert self.store.resume("nobody") is None
        assert self.store.set_schedule("nobody", "* * * * *") is None
        assert self.store.lock("nobody") is None and self.store.locks() == []

    def test_control_of_a_deleted_document_returns_none(self) -> None:
        self.store.seed(["job"])
        self.store.delete("job")
        assert self.store.pause("job") is None
        assert self.store.set_schedule("job", "* * * * *") is None
        assert self.store.lock("job") is None

    # -- schedule overrides and their version -----------------------------------------------------------

    def test_set_schedule_stores_the_override_and_bumps_the_version(self) -> None:
        self.store.seed(["job"])
        before = self.store.now()
        changed = self.store.set_schedule("job", "*/3 * * * * *", timezone="America/New_York", by="carol")
        assert changed is not None and changed == self.state()
        assert changed.schedule == "*/3 * * * * *" and changed.schedule_timezone == "America/New_York"
        assert changed.schedule_version == 1 and changed.schedule_by == "carol"
        assert changed.schedule_changed_at is not None
        assert changed.schedule_changed_at >= before - timedelta(seconds=1)

    def test_every_change_bumps_the_version_and_a_reset_clears_the_override(self) -> None:
        self.store.seed(["job"])
        self.store.set_schedule("job", "0 6 * * *")
        self.store.set_schedule("job", "0 7 * * *", timezone="UTC")
        reset = self.store.set_schedule("job", None)
        assert reset is not None and reset.schedule is None and reset.schedule_timezone is None
        assert reset.schedule_version == 3

    def test_set_schedule_to_ticks_no_further_apart_than_the_jobs_jitter_is_refused_and_writes_nothing(
            self) -> None:
        registry = Registry()
        mutex_cron("* * * * *", name="job", registry=registry, jitter=timedelta(seconds=30))(lambda: None)
        self.store.seed(["job"])
        before = self.state()
        for spec, interval in [("*/30 * * * * *", "0:00:30"), ("*/40 * * * * *", "0:00:20")]:
            with pytest.raises(CronSpecError) as refused:
                control.set_schedule(self.store, registry, "job", spec, by="ops")
            message = str(refused.value)
            assert "'job'" in message and "jitter 0:00:30" in message and interval in message
            assert self.state() == before
        changed = control.set_schedule(self.store, registry, "job", "0 * * * * *", by="ops")
        assert changed.schedule == "0 * * * * *" and changed.schedule_version == 1

    def test_an_acquire_fired_for_an_old_schedule_is_refused_and_changes_nothing(self) -> None:
        self.store.seed(["job"])
        self.store.set_schedule("job", "*/3 * * * * *")
        result = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK, schedule_version=0)
        assert result.status is AcquireStatus.STALE_SCHEDULE and result.schedule_version == 1
        state = self.state()
        assert not state.locked and state.last_fire_time is None and state.token == 0

    def test_an_acquire_fired_for_the_current_schedule_runs(self) -> None:
        self.store.seed(["job"])
        self.store.set_schedule("job", "*/3 * * * * *")
        assert self.acquire(TICK, version=1) is AcquireStatus.ACQUIRED
        assert self.state().last_fire_time == TICK

    def test_an_acquire_without_a_version_is_not_checked(self) -> None:
        self.store.seed(["job"])
        self.store.set_schedule("job", "*/3 * * * * *")
        assert self.acquire(None, version=None) is AcquireStatus.ACQUIRED
        self.store.force_unlock("job")
        assert self.acquire(TICK, version=None) is AcquireStatus.ACQUIRED

    def test_once_per_fire_holds_across_a_schedule_change(self) -> None:
        assert self.acquire(TICK, version=0) is AcquireStatus.ACQUIRED
        self.store.force_unlock("job")
        self.store.set_schedule("job", "*/3 * * * * *")
        assert self.acquire(TICK, version=1) is AcquireStatus.ALREADY_RAN
        assert self.acquire(TICK + timedelta(seconds=3), version=1) is AcquireStatus.ACQUIRED

    def test_after_set_schedule_returns_no_concurrent_acquire_of_the_old_version_wins(self) -> None:
        self.store.seed(["job"])
        self.store.set_schedule("job", "* * * * * *")
        statuses: list[AcquireStatus] = []

        def take(owner: str) -> None:
            statuses.append(self.acquire(TICK, version=0, owner=owner))

        self.run_together(take, [(f"owner-{i}",) for i in range(6)])  # type: ignore[attr-defined]
        assert statuses == [AcquireStatus.STALE_SCHEDULE] * 6
        assert not self.state().locked

    def test_no_acquire_racing_a_pause_wins_once_pause_has_returned(self) -> None:
        self.store.seed(["job"])
        paused = threading.Event()
        won_after: list[str] = []

        def take(owner: str) -> None:
            for _ in range(40):  # manual runs: only a pause (or a holder, briefly) refuses them
                started_after_pause = paused.is_set()
                if self.acquire(None, owner=owner) is AcquireStatus.ACQUIRED:
                    self.store.force_unlock("job")
                    if started_after_pause:
                        won_after.append(owner)

        def pause() -> None:
            self.store.pause("job")
            paused.set()

        self.run_together(lambda kind, owner: pause() if kind == "pause" else take(owner),  # type: ignore[attr-defined]
                          [("pause", "")] + [("take", f"owner-{i}") for i in range(4)])
        assert won_after == []
        assert self.acquire(TICK) is AcquireStatus.PAUSED

    # -- in a batch ----------------------------------------------------------------------------------

    def test_acquire_many_answers_paused_and_stale_schedule_as_acquire_would(self) -> None:
        self.store.seed(["free", "held", "ran", "paused", "retimed"])
        assert self.store.acquire("held", owner="B", lease=LONG, fire_time=TICK - timedelta(hours=1)).acquired
        assert self.store.acquire("ran", owner="B", lease=timedelta(seconds=30), fire_time=TICK).acquired
        assert self.store.release("ran", token=self.store.lock("ran").token)  # type: ignore[union-attr]
        self.store.pause("paused")
        version = self.store.set_schedule("retimed", "*/5 * * * *")
        assert version is not None

        answers = self.store.acquire_many([
            request("free"), request("held"), request("ran"), request("paused"),
            request("retimed", version=version.schedule_version - 1), request("never.seeded"),
        ])

        assert statuses(answers) == [AcquireStatus.ACQUIRED, AcquireStatus.BUSY, AcquireStatus.ALREADY_RAN,
                                      AcquireStatus.PAUSED, AcquireStatus.STALE_SCHEDULE, AcquireStatus.ACQUIRED]
        free, held, _, _, retimed, new = answers
        assert isinstance(free, Acquisition) and free.token == self.store.lock("free").token  # type: ignore[union-attr]
        assert isinstance(held, Acquisition) and held.holder == "B"
        assert isinstance(retimed, Acquisition) and retimed.schedule_version == version.schedule_version
        assert isinstance(new, Acquisition) and self.store.lock("never.seeded") is not None

    # -- run-time schedules' definitions: define() stores one or removes it, with a new schedule version ---------

    def test_define_creates_a_missing_document_with_the_definition(self) -> None:
        before = self.store.now()
        defined = self.store.define("job", DEFINITION, by="alice")
        assert defined is not None and defined == self.state() and self.store.locks() == [defined]
        assert defined.definition == DEFINITION and defined.schedule_version == 1 and defined.schedule_by == "alice"
        assert defined.token == 0 and not defined.locked and defined.last_fire_time is None
        assert defined.created_at is not None and defined.schedule_changed_at is not None
        assert before - timedelta(seconds=1) <= defined.schedule_changed_at <= self.store.now() + timedelta(seconds=1)

    def test_a_definition_of_the_longest_length_round_trips(self) -> None:
        prefix = '{"target": "报告.send", "pad": "'
        text = prefix + "é" * (MAX_DEFINITION - len(prefix) - 2) + '"}'
        assert len(text) == MAX_DEFINITION and self.store.define("job", text) is not None
        assert self.state().definition == text

    def test_define_revives_a_deleted_document_keeping_its_token_last_fire_and_pause(self) -> None:
        acquired = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        assert acquired.token is not None and self.store.release("job", token=acquired.token)
        self.store.pause("job", by="bob")
        created = self.state().created_at
        self.store.delete("job")
        defined = self.store.define("job", DEFINITION)
        assert defined is not None and defined == self.state()
        assert defined.token == acquired.token and defined.last_fire_time == TICK
        assert defined.paused and defined.paused_by == "bob" and defined.created_at == created

    def test_define_bumps_the_version_and_clears_an_override(self) -> None:
        self.store.define("job", DEFINITION)
        self.store.set_schedule("job", "0 6 * * *", timezone="Europe/Paris")
        redefined = self.store.define("job", '{"spec": "0 7 * * *"}', by="carol")
        assert redefined is not None and redefined.definition == '{"spec": "0 7 * * *"}'
        assert redefined.schedule is None and redefined.schedule_timezone is None
        assert redefined.schedule_version == 3 and redefined.schedule_by == "carol"

    def test_an_acquire_fired_for_the_version_before_define_is_refused_stale(self) -> None:
        self.store.define("job", DEFINITION)
        self.store.define("job", '{"spec": "0 7 * * *"}')
        result = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK, schedule_version=1)
        assert result.status is AcquireStatus.STALE_SCHEDULE and result.schedule_version == 2
        assert not self.state().locked and self.state().token == 0

    def test_define_none_hides_the_document_and_returns_it_without_definition(self) -> None:
        acquired = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK)
        self.store.define("job", DEFINITION)
        removed = self.store.define("job", None, by="dave")
        assert removed is not None and removed.name == "job" and removed.definition is None
        assert removed.schedule_version == 2 and removed.schedule_by == "dave"
        assert removed.token == acquired.token and removed.last_fire_time == TICK
        assert self.store.lock("job") is None and self.store.locks() == []
        revived = self.store.define("job", DEFINITION)
        assert revived is not None and revived.token == acquired.token and revived.schedule_version == 3

    def test_define_none_of_an_unknown_or_deleted_name_returns_none_and_changes_nothing(self) -> None:
        assert self.store.define("nobody", None) is None
        assert self.store.lock("nobody") is None and self.store.locks() == []
        self.store.define("job", DEFINITION)
        self.store.delete("job")
        assert self.store.define("job", None) is None
        self.store.seed(["job"])
        assert self.state().definition == DEFINITION and self.state().schedule_version == 1

    def test_an_acquire_fired_before_define_none_is_refused_stale(self) -> None:
        self.store.define("job", DEFINITION)
        self.store.define("job", None)
        result = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK, schedule_version=1)
        assert result.status is AcquireStatus.STALE_SCHEDULE and result.schedule_version == 2

    def test_the_other_operations_keep_the_definition(self) -> None:
        self.store.define("job", DEFINITION)
        acquired = self.store.acquire("job", owner="A", lease=LONG, fire_time=TICK, schedule_version=1)
        assert acquired.token is not None and self.store.renew("job", token=acquired.token, lease=LONG)
        assert self.store.release("job", token=acquired.token, outcome="failed", error="boom")
        assert self.store.open_incident("job", "failing: boom") and self.store.close_incident("job", "failing: boom")
        self.store.pause("job")
        self.store.resume("job")
        self.store.set_schedule("job", "0 6 * * *")
        self.store.acquire("job", owner="B", lease=LONG, fire_time=None)
        self.store.force_unlock("job")
        self.store.delete("job")
        self.store.seed(["job"])
        assert self.state().definition == DEFINITION and self.store.locks()[0].definition == DEFINITION

    @pytest.mark.parametrize("bad", ["", "not json", '["a", "list"]', '"text"', "null", 42, None,
                                     '{"pad": "' + "x" * MAX_DEFINITION + '"}'])
    def test_check_definition_refuses_what_is_not_a_json_object_of_at_most_max_definition(self, bad: object) -> None:
        with pytest.raises(ValueError, match="schedule definition must be"):
            check_definition(bad)
        if bad is not None:  # None: define() removes the schedule
            with pytest.raises(ValueError, match="schedule definition must be"):
                self.store.define("job", bad)  # type: ignore[arg-type]
            assert self.store.lock("job") is None

    def test_concurrent_defines_of_one_new_name_make_one_document_without_error(self) -> None:
        errors: list[BaseException] = []

        def define(index: int) -> None:
            try:
                self.store.define("job", json.dumps({"index": index}))
            except BaseException as error:
                errors.append(error)

        self.run_together(define, [(index,) for index in range(6)])  # type: ignore[attr-defined]
        assert errors == []
        assert [state.name for state in self.store.locks()] == ["job"]
        assert self.state().schedule_version == 6 and json.loads(self.state().definition or "")["index"] in range(6)
