"""The Django commands, checks and admin on a store of the lock contract alone (docs/examples/minimal_store.py):
each control operation fails with the core's one-line reason, naming the store, and nothing else breaks."""

from __future__ import annotations

import html
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from docs.examples.minimal_store import SQLiteLockStore
from tests.django.jobhelpers import Declarations

JOB = "tests.lock_only.job"


@pytest.fixture(autouse=True)
def lock_only(settings: Any, tmp_path: Path, declare: Declarations) -> SQLiteLockStore:
    """MUTEXCRON['STORE'] is a store object of the lock contract alone, with JOB declared."""
    store = SQLiteLockStore(str(tmp_path / "locks.db"))
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": store}
    declare("0 * * * *", name=JOB)
    return store


@pytest.mark.parametrize("args, operation", [
    (("pause", JOB), f"pause job {JOB!r}"),
    (("resume", JOB), f"resume job {JOB!r}"),
    (("schedule", JOB, "*/5 * * * *"), f"set the schedule of job {JOB!r}"),
    (("unlock", JOB), f"force-unlock the lock {JOB!r}"),
    (("unlock", "--delete", JOB), f"delete the lock {JOB!r}"),
    (("list",), "list its locks"),
    (("health",), "judge the jobs' health"),
], ids=["pause", "resume", "schedule", "unlock", "delete", "list", "health"])
def test_each_control_command_fails_naming_the_store_and_the_operation(args: tuple[str, ...], operation: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("mutexcron", *args, stdout=StringIO(), stderr=StringIO())
    assert "SQLiteLockStore" in str(raised.value) and f"has no control plane, so it cannot {operation}" in str(
        raised.value)


@pytest.mark.django_db
def test_trigger_runs_the_job_under_its_lock() -> None:
    out = StringIO()
    call_command("mutexcron", "trigger", JOB, stdout=out, stderr=StringIO())
    assert f"job {JOB!r} succeeded" in out.getvalue() and "(token 1)" in out.getvalue()


def test_the_deploy_checks_say_nothing_of_orphans_or_health(settings: Any) -> None:
    ids = {message.id for message in run_checks(include_deployment_checks=True, tags=["mutexcron"])}
    assert not ids & {"mutexcron.W001", "mutexcron.W002", "mutexcron.W004"}


@pytest.mark.django_db
def test_the_admins_locks_page_says_the_store_has_no_control_plane(admin_client: Client) -> None:
    page = html.unescape(admin_client.get("/admin/mutexcron/lock/").content.decode())
    assert "has no control plane, so it cannot list its locks" in page
