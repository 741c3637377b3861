"""``manage.py mutexcron``: list, run (in a real subprocess), trigger, unlock, seed, prune."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from mutexcron import JobContext, default_registry, next_fire_times
from mutexcron_django.models import JobRun, Lock
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import CommandProcess, Declarations, wait_for

UNREACHABLE = "redis://:s3cret-pw@127.0.0.1:1/0"  # nothing listens on port 1: connection refused at once


@pytest.fixture
def no_other_jobs() -> Iterator[None]:
    """Hide jobs other tests' modules may have left in the default registry."""
    saved = list(default_registry)
    default_registry.clear()
    yield
    default_registry.clear()
    for job in saved:
        default_registry.add(job)


def mutexcron(*args: str, **options: object) -> str:
    out = StringIO()
    call_command("mutexcron", *args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


def row(output: str, first_cell: str) -> list[str]:
    """The cells of the table row that starts with ``first_cell`` (cells are 2+ spaces apart)."""
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row for {first_cell!r} in:\n{output}")


def fail() -> None:
    raise RuntimeError("the body broke")


# -- subcommand structure ------------------------------------------------------------------------------


def test_no_subcommand_is_an_error() -> None:
    with pytest.raises(CommandError, match="SUBCOMMAND"):
        call_command("mutexcron")


def test_unknown_subcommand_is_an_error() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'frobnicate'"):
        call_command("mutexcron", "frobnicate")


def test_a_subcommand_is_one_decorated_method() -> None:
    from mutexcron_django.management.commands.mutexcron import Command, argument, subcommand

    class Extended(Command):
        @subcommand("hello", "Say hello.", argument("--to", default="world"))
        def hello(self, *, to: str, **_: object) -> None:
            self.stdout.write(f"hello {to}")

    out = StringIO()
    call_command(Extended(), "hello", "--to", "ops", stdout=out)
    assert out.getvalue() == "hello ops\n"
    assert [spec.name for spec, _ in Extended.subcommands()] == [
        "list", "run", "trigger", "unlock", "seed", "prune", "worker", "health", "pause", "resume", "schedule",
        "schedules", "backfill", "hello"]


@pytest.mark.django_db
def test_djangos_own_options_work_after_the_subcommand_too() -> None:
    output = mutexcron("prune", "--verbosity", "2", "--traceback", "--older-than", "1")

    assert output.startswith("deleted 0 run(s)")


@pytest.mark.parametrize("argv", [["-v", "3", "seed"], ["seed", "-v", "3"]], ids=["before", "after"])
def test_djangos_own_options_are_read_before_or_after_the_subcommand(argv: list[str]) -> None:
    from mutexcron_django.management.commands.mutexcron import Command

    options = Command().create_parser("manage.py", "mutexcron").parse_args(argv)

    assert (options.verbosity, options.subcommand, options.traceback) == (3, "seed", False)


# -- list ------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_list_shows_schedule_timezone_and_next_fire_in_the_jobs_zone(declare: Declarations) -> None:
    declare("0 0 12 29 2 *", name="tests.cmd.leap", timezone="Asia/Tokyo")  # noon of every Feb 29 in Tokyo
    (expected,) = next_fire_times("0 0 12 29 2 *", after=timezone.now(), timezone="Asia/Tokyo")

    cells = row(mutexcron("list"), "tests.cmd.leap")

    assert cells[1:4] == ["0 0 12 29 2 *", "Asia/Tokyo", expected.strftime("%Y-%m-%d 12:00:00 JST")]


@pytest.mark.django_db
@override_settings(MUTEXCRON={"AUTOSTART": False, "TIMEZONE": "America/New_York"})
def test_list_uses_the_scheduler_zone_for_jobs_without_one(declare: Declarations) -> None:
    declare("30 6 * * *", name="tests.cmd.morning")
    (expected,) = next_fire_times("30 6 * * *", after=timezone.now(), timezone="America/New_York")

    cells = row(mutexcron("list"), "tests.cmd.morning")

    assert cells[2] == "America/New_York"
    assert cells[3] in {expected.strftime("%Y-%m-%d 06:30:00 EST"), expected.strftime("%Y-%m-%d 06:30:00 EDT")}


@pytest.mark.django_db
def test_list_shows_a_held_lock_with_holder_and_lease_expiry(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.held")
    store = DjangoLockStore()
    store.acquire("tests.cmd.held", owner="web-7:123", lease=timedelta(minutes=5), fire_time=None)
    until = store.lock("tests.cmd.held").lock_until

    cells = row(mutexcron("list"), "tests.cmd.held")

    assert cells[4:7] == ["held", "web-7:123", until.strftime("%Y-%m-%d %H:%M:%S UTC")]


@pytest.mark.django_db
def test_list_state_running_and_match_choose_the_held_job(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.busy")
    declare("@daily", name="tests.cmd.idle")
    DjangoLockStore().acquire("tests.cmd.busy", owner="web-7:123", lease=timedelta(minutes=5), fire_time=None)

    running = json.loads(mutexcron("list", "--json", "--state", "running"))
    matched = mutexcron("list", "--match", "tests.cmd.i*", "--limit", "1")

    assert [job["name"] for job in running["jobs"]] == ["tests.cmd.busy"] and running["chosen"] == 1
    assert row(matched, "tests.cmd.idle") and "tests.cmd.busy" not in matched
    assert "1 of the 1 job(s) chosen by --match 'tests.cmd.i*' --limit 1" in matched


@pytest.mark.django_db
def test_list_shows_a_free_lock_with_its_last_fire(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.free")
    store = DjangoLockStore()
    fire = datetime(2026, 1, 2, 0, 0, tzinfo=UTC)
    acquisition = store.acquire("tests.cmd.free", owner="web-1", lease=timedelta(minutes=5), fire_time=fire)
    store.release("tests.cmd.free", token=acquisition.token)

    cells = row(mutexcron("list"), "tests.cmd.free")

    assert cells[4:] == ["free", "-", "-", "2026-01-02 00:00:00 UTC"]


@pytest.mark.django_db
def test_list_shows_a_job_without_a_lock_document_as_unseeded(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.unseeded")

    assert row(mutexcron("list"), "tests.cmd.unseeded")[4] == "unseeded"


@pytest.mark.django_db
def test_list_shows_orphan_locks_and_how_to_delete_them(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.declared")
    DjangoLockStore().seed(["tests.cmd.declared", "tests.cmd.gone"])

    output = mutexcron("list")

    assert "unlock --delete NAME" in output
    assert row(output, "tests.cmd.gone")[1] == "free"
    assert row(output, "tests.cmd.declared")[1] == "@daily"


@pytest.mark.django_db
@pytest.mark.usefixtures("no_other_jobs")
def test_list_says_when_no_job_is_declared() -> None:
    assert "No jobs declared" in mutexcron("list")


@pytest.mark.django_db
def test_list_json_has_every_field(declare: Declarations) -> None:
    declare("0 0 12 29 2 *", name="tests.cmd.json", timezone="Asia/Tokyo")
    store = DjangoLockStore()
    store.acquire("tests.cmd.json", owner="web-2", lease=timedelta(minutes=5), fire_time=None)
    store.seed(["tests.cmd.orphan"])
    (expected,) = next_fire_times("0 0 12 29 2 *", after=timezone.now(), timezone="Asia/Tokyo")

    listing = json.loads(mutexcron("list", "--json"))

    (job,) = [job for job in listing["jobs"] if job["name"] == "tests.cmd.json"]
    assert job["spec"] == "0 0 12 29 2 *" and job["timezone"] == "Asia/Tokyo"
    assert datetime.fromisoformat(job["next_fire"]) == expected
    assert job["lock"]["state"] == "held" and job["lock"]["held"] is True
    assert job["lock"]["locked_by"] == "web-2" and job["lock"]["token"] == 1
    assert datetime.fromisoformat(job["lock"]["lock_until"]) == store.lock("tests.cmd.json").lock_until
    assert [(lock["name"], lock["state"]) for lock in listing["orphan_locks"]] == [("tests.cmd.orphan", "free")]
    assert listing["store"] == "<DjangoLockStore database='default'>" and listing["store_error"] is None


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_list_with_the_store_down_shows_the_jobs_and_fails_without_the_password(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.down")
    out = StringIO()

    with pytest.raises(CommandError, match="cannot be reached") as raised:
        call_command("mutexcron", "list", stdout=out)

    assert row(out.getvalue(), "tests.cmd.down")[4] == "unknown"
    assert "s3cret-pw" not in out.getvalue() + str(raised.value)


def test_list_works_on_a_redis_store(declare: Declarations, redis_url: str) -> None:
    declare("@hourly", name="tests.cmd.redis")
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": redis_url}):
        mutexcron("seed")
        output = mutexcron("list")

    assert "RedisLockStore" in output
    assert row(output, "tests.cmd.redis")[4] == "free"


# -- trigger ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_trigger_runs_the_job_under_its_lock_and_prints_the_outcome(declare: Declarations) -> None:
    seen: list[JobContext] = []
    declare("@yearly", seen.append, name="tests.cmd.trigger")

    output = mutexcron("trigger", "tests.cmd.trigger")

    (ctx,) = seen
    assert output.startswith("job 'tests.cmd.trigger' succeeded in ")
    assert f"(token {ctx.token})" in output and ctx.token == 1
    assert Lock.objects.get(name="tests.cmd.trigger").locked is False
    assert JobRun.objects.get(job_name="tests.cmd.trigger").manual is True


@pytest.mark.django_db
def test_trigger_of_a_failing_job_is_an_error_with_the_exception(declare: Declarations) -> None:
    declare("@yearly", fail, name="tests.cmd.fails")
    err = StringIO()

    with pytest.raises(CommandError, match=r"job 'tests\.cmd\.fails' failed .*RuntimeError: the body broke"):
        call_command("mutexcron", "trigger", "tests.cmd.fails", stdout=StringIO(), stderr=err)

    assert "Traceback" in err.getvalue()
    assert JobRun.objects.get(job_name="tests.cmd.fails").outcome == "failed"


@pytest.mark.django_db
def test_trigger_of_a_busy_job_is_an_error_naming_the_holder(declare: Declarations) -> None:
    ran: list[JobContext] = []
    declare("@yearly", ran.append, name="tests.cmd.busy")
    DjangoLockStore().acquire("tests.cmd.busy", owner="web-9:42", lease=timedelta(minutes=5), fire_time=None)

    with pytest.raises(CommandError, match="did not run: skipped_busy: lock held by web-9:42"):
        mutexcron("trigger", "tests.cmd.busy")

    assert ran == []


@pytest.mark.django_db
def test_trigger_of_a_busy_job_with_on_busy_raise_is_an_error(declare: Declarations) -> None:
    declare("@yearly", name="tests.cmd.busy_raise", on_busy="raise")
    DjangoLockStore().acquire("tests.cmd.busy_raise", owner="web-3", lease=timedelta(minutes=5), fire_time=None)

    with pytest.raises(CommandError, match=r"is locked by another run \(lock held by web-3\)"):
        mutexcron("trigger", "tests.cmd.busy_raise")


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
@pytest.mark.django_db
def test_trigger_with_the_store_down_is_an_error_without_the_password(declare: Declarations) -> None:
    declare("@yearly", name="tests.cmd.nostore")

    with pytest.raises(CommandError, match="did not run: skipped_store_error") as raised:
        mutexcron("trigger", "tests.cmd.nostore")

    assert "s3cret-pw" not in str(raised.value)


@pytest.mark.django_db  # the store is asked for a run-time schedule of that name
def test_trigger_of_an_unknown_job_lists_the_declared_jobs(declare: Declarations) -> None:
    declare("@yearly", name="tests.cmd.known")

    with pytest.raises(CommandError, match=r"no job named 'tests.cmd.nope' .*declared jobs: .*tests.cmd.known"):
        mutexcron("trigger", "tests.cmd.nope")


# -- unlock ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_unlock_frees_a_held_lock(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.stuck")
    store = DjangoLockStore()
    store.acquire("tests.cmd.stuck", owner="dead-host:1", lease=timedelta(hours=1), fire_time=None)

    output = mutexcron("unlock", "tests.cmd.stuck")

    assert output == "unlocked 'tests.cmd.stuck' (was held by dead-host:1)\n"
    assert store.lock("tests.cmd.stuck").is_held(store.now()) is False


@pytest.mark.django_db
def test_unlock_of_a_free_lock_says_so(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.idle")
    DjangoLockStore().seed(["tests.cmd.idle"])

    assert mutexcron("unlock", "tests.cmd.idle") == "'tests.cmd.idle' was not locked; nothing to do\n"


@pytest.mark.django_db
def test_unlock_delete_removes_an_orphan_lock() -> None:
    DjangoLockStore().seed(["tests.cmd.orphaned"])

    output = mutexcron("unlock", "--delete", "tests.cmd.orphaned")

    assert "deleted the orphan lock 'tests.cmd.orphaned'" in output
    assert DjangoLockStore().lock("tests.cmd.orphaned") is None


@pytest.mark.django_db
def test_unlock_delete_refuses_an_orphan_whose_lease_the_store_says_is_live() -> None:
    store = DjangoLockStore()
    store.acquire("tests.cmd.running", owner="old-host:7", lease=timedelta(hours=1), fire_time=None)
    lease_end = store.lock("tests.cmd.running").lock_until

    with pytest.raises(CommandError) as refused:
        mutexcron("unlock", "--delete", "tests.cmd.running")

    message = str(refused.value)
    assert "'tests.cmd.running'" in message and "old-host:7" in message and "--force" in message
    assert f"{lease_end:%Y-%m-%d %H:%M:%S}" in message
    assert store.lock("tests.cmd.running") is not None


@pytest.mark.django_db
def test_unlock_delete_force_deletes_a_live_lock_whose_lease_still_fences_others() -> None:
    store = DjangoLockStore()
    store.acquire("tests.cmd.forced", owner="old-host:7", lease=timedelta(hours=1), fire_time=None)

    output = mutexcron("unlock", "--delete", "--force", "tests.cmd.forced")

    assert "deleted the orphan lock 'tests.cmd.forced'" in output
    assert store.lock("tests.cmd.forced") is None
    busy = store.acquire("tests.cmd.forced", owner="new-host:1", lease=timedelta(hours=1), fire_time=None)
    assert busy.holder == "old-host:7" and not busy.acquired


@pytest.mark.django_db
def test_unlock_delete_refuses_a_declared_job(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.alive")
    DjangoLockStore().seed(["tests.cmd.alive"])

    with pytest.raises(CommandError, match="is declared: --delete is for orphan locks"):
        mutexcron("unlock", "tests.cmd.alive", "--delete")

    assert Lock.objects.filter(name="tests.cmd.alive").exists()


@pytest.mark.django_db
def test_unlock_of_an_unknown_name_lists_declared_jobs_and_orphans(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.real")
    DjangoLockStore().seed(["tests.cmd.leftover"])

    with pytest.raises(CommandError, match=r"declared jobs: .*tests.cmd.real.*orphan locks: tests.cmd.leftover"):
        mutexcron("unlock", "tests.cmd.typo")


# -- seed ------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("no_other_jobs")
def test_seed_creates_missing_lock_documents_and_prints_how_many(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.a")
    declare("@daily", name="tests.cmd.b")
    DjangoLockStore().seed(["tests.cmd.a"])

    output = mutexcron("seed")

    assert output.startswith("created 1 lock(s) for 2 declared job(s)")
    assert set(Lock.objects.values_list("name", flat=True)) == {"tests.cmd.a", "tests.cmd.b"}
    assert mutexcron("seed").startswith("created 0 lock(s)")


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_seed_with_the_store_down_is_an_error(declare: Declarations) -> None:
    declare("@daily", name="tests.cmd.seed_down")

    with pytest.raises(CommandError, match="cannot be reached"):
        mutexcron("seed")


# -- prune -----------------------------------------------------------------------------------------------


def _run_started(ago: timedelta) -> JobRun:
    started = timezone.now() - ago
    return JobRun.objects.create(job_name="tests.cmd.history", fire_time=started, instance_id="i",
                                 outcome="succeeded", started_at=started, finished_at=started)


@pytest.mark.django_db
def test_prune_deletes_history_older_than_the_retention() -> None:
    _run_started(timedelta(days=31))
    kept = _run_started(timedelta(days=29))

    output = mutexcron("prune")

    assert output.startswith("deleted 1 run(s) that started before ")
    assert list(JobRun.objects.all()) == [kept]


@pytest.mark.django_db
def test_prune_older_than_overrides_the_retention() -> None:
    _run_started(timedelta(hours=13))
    kept = _run_started(timedelta(hours=11))

    assert mutexcron("prune", "--older-than", "0.5").startswith("deleted 1 run(s)")
    assert list(JobRun.objects.all()) == [kept]


@pytest.mark.django_db
@override_settings(MUTEXCRON={"AUTOSTART": False, "HISTORY_RETENTION": None})
def test_prune_without_retention_keeps_everything() -> None:
    _run_started(timedelta(days=3000))

    assert "nothing pruned" in mutexcron("prune")
    assert JobRun.objects.count() == 1


@pytest.mark.parametrize("days", ["-1", "soon", "nan"])
def test_prune_rejects_a_bad_number_of_days(days: str) -> None:
    with pytest.raises(CommandError, match="--older-than"):
        mutexcron("prune", "--older-than", days)


# -- run: a real process, stopped by a signal ------------------------------------------------------------


class RunProcess(CommandProcess):
    """``python -m django mutexcron run`` with tests/django/run_settings.py, on a SQLite file of its own."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.database = tmp_path / "run.sqlite3"
        output = tmp_path / "jobs.out"
        super().__init__(tmp_path, "tests.django.run_settings", output, {
            "MUTEXCRON_TEST_RUN_DB": str(self.database), "MUTEXCRON_TEST_RUN_OUTPUT": str(output), **env,
        })

    def django(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "django", *args], env=self.env, cwd=self.tmp_path,
                              capture_output=True, text=True, timeout=120, check=True)

    def start(self) -> None:
        self.django("migrate", "--verbosity", "0")
        self.launch("run")


@pytest.fixture
def run_process(tmp_path: Path) -> Iterator[RunProcess]:
    process = RunProcess(tmp_path)
    yield process
    process.kill()


def _slow_run_in_progress(lines: list[str]) -> bool:
    started = {line.split()[1] for line in lines if line.startswith("slow-start")}
    ended = {line.split()[1] for line in lines if line.startswith("slow-end")}
    return bool(started - ended)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_runs_the_jobs_until_a_signal_then_waits_for_running_bodies_and_exits_0(
    run_process: RunProcess, signum: int
) -> None:
    run_process.start()
    wait_for(lambda: any(line.startswith("tick ") for line in run_process.lines()), what="a tick of runjobs.tick")
    wait_for(lambda: _slow_run_in_progress(run_process.lines()), what="runjobs.slow running")

    assert run_process.stop(signum) == 0, run_process.stderr

    lines = run_process.lines()
    assert sum(line.startswith("slow-start") for line in lines) == sum(line.startswith("slow-end") for line in lines)
    assert "mutexcron scheduler run-test running 2 job(s) on <DjangoLockStore database='default'>" in run_process.stdout
    assert f"{signal.Signals(signum).name} received; stopping scheduler run-test" in run_process.stdout
    assert run_process.stdout.rstrip().endswith("mutexcron: scheduler run-test stopped")
    assert "Traceback" not in run_process.stderr
    with sqlite3.connect(run_process.database) as db:
        (ran,) = db.execute("SELECT COUNT(*) FROM mutexcron_jobrun WHERE job_name = 'runjobs.tick' "
                            "AND outcome = 'succeeded'").fetchone()
    assert ran >= 1


def test_run_logs_the_runs_to_stderr_when_the_project_has_no_logging_config(run_process: RunProcess) -> None:
    run_process.start()
    wait_for(lambda: "job 'runjobs.tick'" in run_process.stderr, what="a logged run")

    assert run_process.stop(signal.SIGTERM) == 0
    assert "INFO mutexcron.scheduler: mutexcron scheduler run-test started with 2 job(s)" in run_process.stderr


def test_run_with_the_store_down_keeps_running_and_masks_the_password(tmp_path: Path) -> None:
    run = RunProcess(tmp_path, MUTEXCRON_TEST_RUN_STORE=UNREACHABLE)
    try:
        run.start()
        wait_for(lambda: "skipped until it returns" in run.stderr, what="the store outage logged")

        assert run.stop(signal.SIGTERM) == 0, run.stderr
    finally:
        run.kill()
    assert "running 2 job(s) on <RedisLockStore redis://***@127.0.0.1:1/0" in run.stdout
    assert "s3cret-pw" not in run.stdout + run.stderr
    assert run.lines() == []
