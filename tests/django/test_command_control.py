"""``manage.py mutexcron pause|resume|schedule`` and what ``list`` shows of them, on the SQL store and on
Redis (issue 9)."""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from mutexcron import Outcome, Scheduler, default_registry
from mutexcron.stores import LockState
from mutexcron_django.conf import get_settings
from tests.django.jobhelpers import Declarations
from tests.test_cli import lock as read_lock

JOB = "tests.control.job"
UNREACHABLE = "redis://:s3cret-pw@127.0.0.1:1/0"
pytestmark = pytest.mark.django_db  # the SQL store's tables (the Redis runs need none)


@pytest.fixture(params=["sql", "redis"])
def store(request: pytest.FixtureRequest, declare: Declarations) -> Iterator[str]:
    """The settings' store (the project's database, or Redis under this test's own prefix), with JOB declared."""
    url = "django://" if request.param == "sql" else request.getfixturevalue("redis_url")
    declare("0 * * * *", name=JOB)
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": url}):
        yield url


def mutexcron(*args: str) -> str:
    out = StringIO()
    call_command("mutexcron", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def lock(name: str = JOB) -> LockState:
    spec = get_settings().store_spec
    assert isinstance(spec, str)
    return read_lock(spec, name)


def os_user() -> str:
    return getpass.getuser()


# -- pause / resume ---------------------------------------------------------------------------------------


def test_pause_stops_the_job_on_every_instance_and_records_the_os_user(store: str) -> None:
    output = mutexcron("pause", JOB)

    state = lock()
    assert state.paused and state.paused_until is None and state.paused_by == os_user()
    assert output.strip() == f"paused job {JOB!r} on every instance until resumed (by {os_user()})"
    scheduler = Scheduler(store, registry=default_registry)
    try:
        assert scheduler.run_tick(JOB, datetime(2030, 1, 1, tzinfo=UTC)).outcome is Outcome.SKIPPED_PAUSED
        assert scheduler.run_now(JOB).outcome is Outcome.SKIPPED_PAUSED
    finally:
        scheduler.shutdown()


def test_pause_until_a_naive_time_reads_it_as_utc(store: str) -> None:
    mutexcron("pause", JOB, "--until", "2099-05-06T07:08:09", "--by", "ops-alice")

    state = lock()
    assert state.paused_until == datetime(2099, 5, 6, 7, 8, 9, tzinfo=UTC) and state.paused_by == "ops-alice"


def test_pause_until_an_aware_time(store: str) -> None:
    mutexcron("pause", JOB, "--until", "2099-05-06T09:08:09+02:00")

    assert lock().paused_until == datetime(2099, 5, 6, 7, 8, 9, tzinfo=UTC)


def test_pause_for_a_duration(store: str) -> None:
    before = datetime.now(UTC)
    mutexcron("pause", JOB, "--for", "2h30m")
    after = datetime.now(UTC)

    until = lock().paused_until
    assert until is not None
    assert before + timedelta(hours=2, minutes=30) - timedelta(seconds=1) <= until
    assert until <= after + timedelta(hours=2, minutes=30) + timedelta(seconds=1)


def test_pause_keeps_an_operators_note(store: str) -> None:
    output = mutexcron("pause", JOB, "--note", "the warehouse is being migrated")

    assert lock().pause_note == "the warehouse is being migrated"
    assert output.strip().endswith(": the warehouse is being migrated")
    assert "the warehouse is being migrated" in mutexcron("list")


def test_pause_until_a_past_time_is_refused(store: str) -> None:
    mutexcron("seed")

    with pytest.raises(CommandError, match=r"'2001-01-01T00:00:00' is in the past"):
        mutexcron("pause", JOB, "--until", "2001-01-01T00:00:00")

    assert lock().paused is False

@pytest.mark.parametrize("value", ["2x", "0s", "h", "1.5h", "-5m", "400d"])
def test_a_bad_duration_is_an_error_naming_it(store: str, value: str) -> None:
    with pytest.raises(CommandError, match=f"argument --for: {value!r}"):
        mutexcron("pause", JOB, f"--for={value}")


def test_a_bad_until_is_an_error_naming_it(store: str) -> None:
    with pytest.raises(CommandError, match="'next tuesday' is not an ISO-8601 time"):
        mutexcron("pause", JOB, "--until", "next tuesday")


def test_until_and_for_do_not_go_together(store: str) -> None:
    with pytest.raises(CommandError, match="--until and --for do not go together"):
        mutexcron("pause", JOB, "--until", "2099-01-01T00:00:00", "--for", "1h")


def test_resume_lifts_the_pause(store: str) -> None:
    mutexcron("pause", JOB)

    output = mutexcron("resume", JOB)

    assert not lock().paused and output.startswith(f"resumed job {JOB!r}")
    scheduler = Scheduler(store, registry=default_registry)
    try:
        assert scheduler.run_now(JOB).outcome is Outcome.SUCCEEDED
    finally:
        scheduler.shutdown()


# -- schedule ---------------------------------------------------------------------------------------------


def test_schedule_overrides_the_codes_and_reset_brings_it_back(store: str) -> None:
    output = mutexcron("schedule", JOB, "*/5 * * * *", "--timezone", "Europe/Paris", "--by", "ops-bob")

    state = lock()
    assert (state.schedule, state.schedule_timezone, state.schedule_version, state.schedule_by) == (
        "*/5 * * * *", "Europe/Paris", 1, "ops-bob")
    assert "now fires on '*/5 * * * *' in Europe/Paris" in output and "the code says '0 * * * *'" in output

    output = mutexcron("schedule", JOB, "--reset")

    state = lock()
    assert (state.schedule, state.schedule_timezone, state.schedule_version) == (None, None, 2)
    assert state.schedule_by == os_user()
    assert output.strip() == f"job {JOB!r} is back on the code's schedule '0 * * * *' (schedule version 2)"


@pytest.mark.parametrize(("args", "message"), [
    (["61 * * * *"], "minute"),
    (["*/5 * * * *", "--timezone", "Mars/Olympus"], "Mars/Olympus"),
])
def test_a_bad_spec_or_zone_writes_nothing(store: str, args: list[str], message: str) -> None:
    mutexcron("seed")

    with pytest.raises(CommandError, match=message):
        mutexcron("schedule", JOB, *args)

    assert (lock().schedule, lock().schedule_version) == (None, 0)


@pytest.mark.parametrize(("args", "message"), [
    ([], "give the new SPEC"),
    (["* * * * *", "--reset"], "--reset takes no SPEC"),
    (["--reset", "--timezone", "UTC"], "--reset takes no SPEC and no --timezone"),
])
def test_schedule_needs_a_spec_or_reset(store: str, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        mutexcron("schedule", JOB, *args)


# -- errors -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["pause"], ["resume"], ["schedule", "--reset"], ["schedule", "@daily"]],
                         ids=lambda args: " ".join(args))
def test_an_unknown_job_is_an_error(store: str, args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"has no job named 'tests\.control\.nope'"):
        mutexcron(args[0], "tests.control.nope", *args[1:])


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_an_unreachable_store_is_an_error_without_the_password(declare: Declarations) -> None:
    declare("@daily", name=JOB)

    with pytest.raises(CommandError, match="cannot be reached") as raised:
        mutexcron("pause", JOB)

    assert "s3cret-pw" not in str(raised.value)


# -- list -------------------------------------------------------------------------------------------------


def test_list_shows_paused_and_overridden_jobs(store: str) -> None:
    mutexcron("pause", JOB, "--until", "2099-05-06T07:08:09", "--by", "ops-alice")
    mutexcron("schedule", JOB, "*/10 * * * *", "--timezone", "Asia/Tokyo", "--by", "ops-bob")

    output = mutexcron("list")

    table_row = [line for line in output.splitlines() if line.startswith(JOB)]
    assert "*/10 * * * * (override v1)" in table_row[0] and "Asia/Tokyo" in table_row[0]
    assert "(paused)" in table_row[0]
    paused, override = table_row[1], table_row[2]
    assert "ops-alice" in paused and "2099-05-06 07:08:09 UTC" in paused
    assert override.split()[1:6] == ["*/10", "*", "*", "*", "*"] and "ops-bob" in override and "0 * * * *" in override
    assert "resume NAME" in output and "schedule NAME --reset" in output


def test_list_json_has_the_pause_and_the_override(store: str) -> None:
    mutexcron("pause", JOB, "--for", "1h", "--by", "ops-alice")
    mutexcron("schedule", JOB, "*/10 * * * *")

    (job,) = [job for job in json.loads(mutexcron("list", "--json"))["jobs"] if job["name"] == JOB]

    assert job["paused"]["by"] == "ops-alice" and job["paused"]["since"] is not None
    assert datetime.fromisoformat(job["paused"]["until"]) > datetime.now(UTC) + timedelta(minutes=59)
    assert job["override"] == {**job["override"], "spec": "*/10 * * * *", "timezone": None, "version": 1}
    assert (job["spec"], job["code_spec"]) == ("*/10 * * * *", "0 * * * *")
    assert job["lock"]["paused"] is True and job["lock"]["schedule_version"] == 1


def test_list_json_of_a_job_left_alone(store: str) -> None:
    mutexcron("seed")

    (job,) = [job for job in json.loads(mutexcron("list", "--json"))["jobs"] if job["name"] == JOB]

    assert (job["paused"], job["override"], job["spec"]) == (None, None, "0 * * * *")
