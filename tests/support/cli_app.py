"""Jobs for tests/test_cli.py: ``python -m mutexcron --app tests.support.cli_app`` imports this module."""

from __future__ import annotations

from mutexcron import callable_target, mutex_cron


@mutex_cron("0 * * * *", name="tests.cli.hourly")
def hourly() -> None:
    """Declared for the command line's tests; never expected to run there."""


@mutex_cron("30 6 * * *", name="tests.cli.morning", timezone="Europe/Paris")
def morning() -> None:
    """A second job, in a zone of its own."""


@callable_target("tests.cli.send")
def send(to: str, copies: int = 1) -> None:
    """A target of run-time schedules, for the ``schedules`` subcommand's tests."""
