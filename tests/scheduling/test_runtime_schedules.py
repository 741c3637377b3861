"""Run-time schedules in one process on the memory store: allowed targets, the checks that store nothing, and how
a scheduler follows what is added, redefined and removed (every store: tests/runtime_schedule_contract.py; several
processes: tests/test_fleet_schedules.py)."""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron import (
    ControlNotSupported,
    DuplicateJobError,
    JobContext,
    JobDefinitionError,
    Outcome,
    Registry,
    Scheduler,
    UnknownJobError,
    callable_target,
    default_registry,
    mutex_cron,
)
from mutexcron.definitions import MAX_DEFINITION, ScheduleDefinition
from mutexcron.stores import LockStore, MemoryLockStore

TICK = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def scheduler(store: MemoryLockStore, registry: Registry, calls: list[dict[str, Any]]) -> Scheduler:
    def send_report(to: str, copies: int = 1) -> None:
        calls.append({"to": to, "copies": copies})

    registry.allow(send_report, "send_report")
    return Scheduler(store, registry=registry, instance_id="A")


def test_allow_names_a_target_by_module_and_qualname_by_default(registry: Registry) -> None:
    def rebuild() -> None: ...

    registry.allow(rebuild)
    assert list(registry.targets()) == [f"{__name__}.{rebuild.__qualname__}"]


def test_callable_target_allows_a_function_in_the_default_registry_and_returns_it() -> None:
    def nightly() -> None: ...

    try:
        assert callable_target("tests.nightly")(nightly) is nightly
        assert default_registry.target("tests.nightly") is nightly
    finally:
        default_registry._targets.pop("tests.nightly", None)


def test_allowing_another_function_under_a_taken_target_name_is_refused(registry: Registry) -> None:
    registry.allow(lambda: None, "cleanup")
    with pytest.raises(DuplicateJobError, match="'cleanup' is allowed twice"):
        registry.allow(print, "cleanup")


def test_a_schedule_calls_its_target_with_its_kwargs(scheduler: Scheduler, calls: list[dict[str, Any]]) -> None:
    scheduler.add_schedule("report-ops", "0 6 * * *", "send_report", kwargs={"to": "ops", "copies": 2})
    assert scheduler.run_tick("report-ops", TICK).outcome is Outcome.SUCCEEDED
    assert calls == [{"to": "ops", "copies": 2}]


def test_a_target_given_as_the_function_is_stored_by_its_allowed_name(store: MemoryLockStore,
                                                                      registry: Registry) -> None:
    def purge(days: int) -> None: ...

    registry.allow(purge, "purge")
    state = Scheduler(store, registry=registry).add_schedule("purge-old", "0 3 * * *", purge, kwargs={"days": 30})
    assert json.loads(state.definition or "")["target"] == "purge"


def test_a_target_that_takes_ctx_receives_the_tick_s_context(store: MemoryLockStore, registry: Registry) -> None:
    seen: list[JobContext] = []
    registry.allow(lambda ctx, label: seen.append(ctx), "with_ctx")
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    scheduler.add_schedule("labelled", "0 6 * * *", "with_ctx", kwargs={"label": "x"})
    scheduler.run_tick("labelled", TICK)
    assert [(ctx.job_name, ctx.fire_time, ctx.token) for ctx in seen] == [("labelled", TICK, 1)]


def test_the_stored_definition_holds_target_kwargs_and_options(scheduler: Scheduler) -> None:
    state = scheduler.add_schedule("report-ops", "0 6 * * *", "send_report", kwargs={"to": "ops"},
                                   timezone="Europe/Paris", lease=90, catch_up="latest", by="alice")
    assert json.loads(state.definition or "") == {
        "target": "send_report", "spec": "0 6 * * *", "kwargs": {"to": "ops"}, "timezone": "Europe/Paris",
        "lease": 90.0, "catch_up": "latest", "run_on": "here", "timeout": None, "start_deadline": None,
        "on_busy": "skip", "pause_on_failure": None}
    assert state.schedule_by == "alice"


def test_the_stored_definition_holds_the_run_options_of_a_declared_job(scheduler: Scheduler) -> None:
    state = scheduler.add_schedule("report-ops", "0 6 * * *", "send_report", kwargs={"to": "ops"}, timeout=90,
                                   start_deadline=timedelta(minutes=2), on_busy="buffer_one", pause_on_failure=3)
    stored = json.loads(state.definition or "")
    assert {key: stored[key] for key in ("timeout", "start_deadline", "on_busy", "pause_on_failure")} == {
        "timeout": 90.0, "start_deadline": 120.0, "on_busy": "buffer_one", "pause_on_failure": 3}


@pytest.mark.parametrize(("option", "value"), [
    ("timeout", 0), ("timeout", -5), ("timeout", "10m"), ("timeout", float("inf")), ("timeout", 10**9),
    ("start_deadline", timedelta(0)), ("start_deadline", "soon"),
    ("on_busy", "queue"), ("on_busy", None),
    ("pause_on_failure", 0), ("pause_on_failure", True), ("pause_on_failure", 2.5),
])
def test_a_bad_run_option_is_refused_with_the_error_mutex_cron_gives_and_stores_nothing(
        scheduler: Scheduler, store: MemoryLockStore, option: str, value: Any) -> None:
    with pytest.raises(JobDefinitionError) as declared:
        mutex_cron("0 6 * * *", name="report-ops", registry=Registry(), **{option: value})(lambda: None)
    with pytest.raises(JobDefinitionError) as added:
        scheduler.add_schedule("report-ops", "0 6 * * *", "send_report", kwargs={"to": "ops"}, **{option: value})
    assert str(added.value) == str(declared.value) and option in str(added.value)
    assert store.lock("report-ops") is None


def test_a_definition_stored_without_the_run_options_builds_a_job_with_their_defaults(
        scheduler: Scheduler, store: MemoryLockStore, calls: list[dict[str, Any]]) -> None:
    old = {"target": "send_report", "spec": "0 6 * * *", "kwargs": {"to": "ops"}, "timezone": None, "lease": 600.0,
           "catch_up": "skip", "run_on": "here"}  # as a release before the run options stored it
    store.define("report-ops", json.dumps(old))
    assert scheduler.run_tick("report-ops", TICK).outcome is Outcome.SUCCEEDED
    job = scheduler.jobs.get("report-ops")
    assert (job.timeout, job.start_deadline, job.on_busy, job.pause_on_failure) == (None, None, "skip", None)
    assert calls == [{"to": "ops", "copies": 1}]


def test_a_tick_of_a_run_time_schedule_won_after_its_start_deadline_is_skipped_late(
        scheduler: Scheduler, calls: list[dict[str, Any]]) -> None:
    scheduler.add_schedule("report-ops", "0 6 * * *", "send_report", kwargs={"to": "ops"}, start_deadline=60)
    record = scheduler.run_tick("report-ops", TICK)  # years ago: far past its deadline
    assert record.outcome is Outcome.SKIPPED_LATE and "start_deadline" in (record.error or "") and calls == []


def test_a_run_time_schedule_with_pause_on_failure_pauses_itself_after_that_many_failed_runs(
        store: MemoryLockStore, registry: Registry) -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    registry.allow(broken, "broken")
    scheduler = Scheduler(store, registry=registry, instance_id="A")
    scheduler.add_schedule("breaks", "0 * * * *", "broken", pause_on_failure=2)
    outcomes = [scheduler.run_tick("breaks", TICK + timedelta(hours=n)).outcome for n in range(3)]
    assert outcomes == [Outcome.FAILED, Outcome.FAILED, Outcome.SKIPPED_PAUSED]
    state = store.lock("breaks")
    assert state is not None and state.paused and "pause_on_failure" in (state.pause_note or "")


def test_schedules_lists_the_run_time_schedules_and_not_the_declared_jobs(scheduler: Scheduler,
                                                                           registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="declared", registry=registry)(lambda: None)
    scheduler.seed()
    scheduler.add_schedule("b-report", "0 6 * * *", "send_report", kwargs={"to": "b"})
    scheduler.add_schedule("a-report", "0 7 * * *", "send_report", kwargs={"to": "a"})
    assert [state.name for state in scheduler.schedules()] == ["a-report", "b-report"]


@pytest.mark.parametrize(("options", "named"), [
    ({"kwargs": {"to": {1, 2}}}, "kwargs"),
    ({"kwargs": {"to": float("nan")}}, "kwargs"),
    ({"kwargs": {1: "x"}}, "kwargs"),
    ({"kwargs": ["ops"]}, "kwargs"),
    ({"kwargs": {"whom": "ops"}}, "do not fit target 'send_report'"),
    ({"kwargs": {}}, "do not fit target 'send_report'"),
    ({"kwargs": {"to": "x" * MAX_DEFINITION}}, "characters of JSON"),
    ({"timezone": "Mars/Olympus"}, "Mars/Olympus"),
    ({"lease": 0}, "lease"),
    ({"catch_up": "some"}, "catch_up"),
    ({"run_on": "elsewhere"}, "run_on"),
    ({"by": "x" * 300}, "by"),
])
def test_a_bad_field_names_itself_and_stores_nothing(scheduler: Scheduler, store: MemoryLockStore,
                                                     options: dict[str, Any], named: str) -> None:
    options = {"kwargs": {"to": "ops"}, **options}
    with pytest.raises(JobDefinitionError, match=named):
        scheduler.add_schedule("report-ops", "0 6 * * *", "send_report", **options)
    assert store.lock("report-ops") is None


def test_a_bad_spec_is_a_job_definition_error_naming_the_schedule(scheduler: Scheduler,
                                                                  store: MemoryLockStore) -> None:
    with pytest.raises(JobDefinitionError, match="report-ops"):
        scheduler.add_schedule("report-ops", "0 61 * * *", "send_report", kwargs={"to": "ops"})
    assert store.lock("report-ops") is None


def test_an_unknown_target_is_refused_listing_the_allowed_ones(scheduler: Scheduler, store: MemoryLockStore) -> None:
    with pytest.raises(JobDefinitionError, match=r"'os.system' is not allowed \(allowed targets: send_report\)"):
        scheduler.add_schedule("shell", "0 6 * * *", "os.system", kwargs={"command": "true"})
    assert store.lock("shell") is None


def test_a_function_that_was_never_allowed_is_refused(scheduler: Scheduler) -> None:
    with pytest.raises(JobDefinitionError, match="is not allowed"):
        scheduler.add_schedule("printer", "0 6 * * *", print)


def test_a_name_of_a_declared_job_is_refused(scheduler: Scheduler, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    with pytest.raises(JobDefinitionError, match="'digest': the name is a job declared in code"):
        scheduler.add_schedule("digest", "0 6 * * *", "send_report", kwargs={"to": "ops"})


def test_a_name_whose_lock_is_no_run_time_schedule_is_refused(scheduler: Scheduler, store: MemoryLockStore) -> None:
    store.seed(["declared-elsewhere"])
    with pytest.raises(JobDefinitionError, match="no run-time schedule"):
        scheduler.add_schedule("declared-elsewhere", "0 6 * * *", "send_report", kwargs={"to": "ops"})
    assert store.lock("declared-elsewhere").definition is None  # type: ignore[union-attr]


def test_adding_a_name_again_redefines_it(scheduler: Scheduler, calls: list[dict[str, Any]]) -> None:
    first = scheduler.add_schedule("report", "0 6 * * *", "send_report", kwargs={"to": "ops"})
    second = scheduler.add_schedule("report", "0 7 * * *", "send_report", kwargs={"to": "dev"})
    assert second.schedule_version > first.schedule_version
    assert scheduler.run_tick("report", TICK + timedelta(hours=1)).outcome is Outcome.SUCCEEDED
    assert calls == [{"to": "dev", "copies": 1}]


def test_removing_an_unknown_schedule_says_which_exist(scheduler: Scheduler) -> None:
    scheduler.add_schedule("report", "0 6 * * *", "send_report", kwargs={"to": "ops"})
    with pytest.raises(UnknownJobError, match=r"'nightly' .*run-time schedules: report"):
        scheduler.remove_schedule("nightly")


def test_removing_a_declared_job_is_refused(scheduler: Scheduler, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    scheduler.seed()
    with pytest.raises(JobDefinitionError, match="declared in code"):
        scheduler.remove_schedule("digest")


def test_a_removed_schedule_leaves_the_listing_and_the_scheduler(scheduler: Scheduler) -> None:
    scheduler.add_schedule("report", "0 6 * * *", "send_report", kwargs={"to": "ops"})
    scheduler.remove_schedule("report", by="alice")
    assert scheduler.schedules() == []
    assert "report" not in scheduler.jobs


def test_a_late_tick_of_a_removed_schedule_is_skipped_and_its_lock_stays_hidden(
        store: MemoryLockStore, registry: Registry, calls: list[dict[str, Any]]) -> None:
    registry.allow(lambda to: calls.append({"to": to}), "send")
    remover, late = (Scheduler(store, registry=registry, instance_id=name) for name in "AB")
    remover.add_schedule("report", "0 6 1 1 *", "send", kwargs={"to": "ops"})
    with late:  # fires on the schedule as read at its start, and has not synced since
        assert "report" in late.jobs
        remover.remove_schedule("report")
        assert late.run_tick("report", TICK.replace(month=1, day=1)).outcome is Outcome.SKIPPED_STALE_SCHEDULE
        assert calls == [] and store.lock("report") is None and "report" not in late.jobs


def test_a_run_time_schedule_can_be_paused_and_re_timed_like_a_declared_job(scheduler: Scheduler) -> None:
    scheduler.add_schedule("report", "0 6 * * *", "send_report", kwargs={"to": "ops"})
    assert scheduler.pause("report", by="alice").paused
    assert scheduler.run_tick("report", TICK).outcome is Outcome.SKIPPED_PAUSED
    scheduler.resume("report")
    assert scheduler.set_schedule("report", "30 6 * * *").schedule == "30 6 * * *"


def test_a_store_without_a_control_plane_has_no_run_time_schedules(registry: Registry) -> None:
    class LockOnly(LockStore):
        def __init__(self) -> None:
            self.inner = MemoryLockStore()

        def seed(self, names: Any) -> int:
            return self.inner.seed(names)

        def acquire(self, name: str, **kwargs: Any) -> Any:
            return self.inner.acquire(name, **kwargs)

        def renew(self, name: str, **kwargs: Any) -> bool:
            return self.inner.renew(name, **kwargs)

        def release(self, name: str, **kwargs: Any) -> bool:
            return self.inner.release(name, **kwargs)

        def now(self) -> datetime:
            return self.inner.now()

    registry.allow(lambda: None, "noop")
    with pytest.raises(ControlNotSupported, match="add a run-time schedule"):
        Scheduler(LockOnly(), registry=registry).add_schedule("noop", "0 6 * * *", "noop")


def test_health_judges_a_run_time_schedule_as_a_job(scheduler: Scheduler, store: MemoryLockStore) -> None:
    from mutexcron.ops.checkup import check_health

    def fail(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    scheduler.registry.allow(fail, "fail")
    scheduler.add_schedule("breaks", "0 6 * * *", "fail")
    assert scheduler.run_tick("breaks", TICK).outcome is Outcome.FAILED
    report = check_health(store, scheduler.registry, now=TICK + timedelta(minutes=1))
    assert report.jobs == 1 and [(p.job_name, p.kind) for p in report.problems] == [("breaks", "failing")]


def test_list_shows_a_run_time_schedule_as_a_job_and_not_as_an_orphan(scheduler: Scheduler,
                                                                      store: MemoryLockStore) -> None:
    from mutexcron.ops.listing import read_listing

    scheduler.add_schedule("report", "0 6 * * *", "send_report", kwargs={"to": "ops"})
    listing = read_listing(store, scheduler.registry, UTC, TICK)
    assert [(line.job.name, line.job.runtime, line.spec) for line in listing.jobs] == [("report", True, "0 6 * * *")]
    assert listing.orphans == []


def test_a_target_shared_by_many_schedules_has_its_signature_inspected_once(monkeypatch: pytest.MonkeyPatch) -> None:
    inspected: list[object] = []
    original = inspect.signature

    def counting(func: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        inspected.append(func)
        return original(func, *args, **kwargs)

    def notify(to: str, ctx: Any = None) -> None:
        """A target no other test allows: its signature has not been inspected yet."""

    jobs = Registry()
    jobs.allow(notify, "tests.notify")
    monkeypatch.setattr(inspect, "signature", counting)
    built = [ScheduleDefinition("tests.notify", "0 6 * * *", {"to": f"customer-{n}"}).job(f"notify.{n}", jobs)
             for n in range(200)]

    assert len(built) == 200 and inspected.count(notify) == 1
