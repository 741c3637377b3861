"""A bad ``@mutex_cron`` in an app's ``cron.py`` hides no other job: the jobs declared after it in the module are
declared and run, the process's scheduler logs an ERROR naming each job that will not run and why, and the checks
still report it (mutexcron.E001, E002). The app: ``tests.django.checkapps.mixedjobs``."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from mutexcron import default_registry
from mutexcron_django import runtime
from tests.django.test_checks import fresh_declaration_errors, installed, mutexcron_messages  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("fresh_declaration_errors")

MODULE = "tests.django.checkapps.mixedjobs.cron"
VALID = ["checkapps.mixed.between", "checkapps.mixed.first", "checkapps.mixed.last"]


def test_the_valid_jobs_around_bad_ones_in_a_cron_module_are_all_declared() -> None:
    with installed("mixedjobs"):
        declared = [name for name in default_registry.names() if name.startswith("checkapps.")]

    assert declared == VALID
    assert default_registry.get("checkapps.mixed.first").func.__name__ == "first"  # the first of the taken name


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "memory://"})
def test_the_process_scheduler_starts_with_the_valid_jobs_and_logs_an_error_for_each_bad_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with installed("mixedjobs"), caplog.at_level(logging.ERROR, logger="mutexcron.scheduler"):
        scheduler = runtime.start()
        try:
            scheduled = [name for name in scheduler.jobs.names() if name.startswith("checkapps.")]
            seeded = sorted(state.name for state in scheduler.store.locks() if state.name.startswith("checkapps."))
        finally:
            runtime.stop()

    assert scheduled == seeded == VALID
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "mutexcron.scheduler"]
    (seven_fields,) = [message for message in errors if "'checkapps.mixed.seven_fields'" in message]
    assert f"{MODULE}.seven_fields (" in seven_fields and "will not run" in seven_fields
    assert "has 7 fields" in seven_fields
    (taken,) = [message for message in errors if message.startswith("job 'checkapps.mixed.first' (")]
    assert f"{MODULE}.first_again (" in taken and "will not run" in taken and "declared twice" in taken


def test_the_checks_still_report_each_bad_declaration_of_the_module() -> None:
    with installed("mixedjobs"):
        messages = sorted(mutexcron_messages(), key=lambda message: message.id)

    assert [(message.id, message.obj) for message in messages] == [("mutexcron.E001", MODULE),
                                                                   ("mutexcron.E002", MODULE)]
    assert "'checkapps.mixed.seven_fields'" in messages[0].msg and "7 fields" in messages[0].msg
    assert "'checkapps.mixed.first'" in messages[1].msg and "first_again" in messages[1].msg
