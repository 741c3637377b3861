"""``manage.py mutexcron <subcommand>``: inspect and operate the declared jobs and their locks.

- ``list [--json]``: every declared job (schedule, time zone, next fire, lock state) and orphan locks.
- ``run``: a foreground scheduler for a dedicated process; SIGTERM or SIGINT stops it cleanly.
- ``trigger NAME``: run a job now under its lock; fails (exit 1) if the job failed or did not run.
- ``unlock NAME [--delete [--force]]``: free a job's lock (an operator's action); ``--delete`` hides an orphan's.
- ``seed``: create the missing lock documents; ``prune [--older-than DAYS]``: delete old run history.
- ``health [--json]``: exit 0 when the store answers and no job is overdue or failing, else 1.
- ``worker [--types A,B] [--prefetch N]``: a foreground task worker; SIGTERM or SIGINT stops it cleanly.
- ``pause NAME [--until ISO-8601 | --for 2h30m] [--note TEXT] [--by WHO]``, ``resume NAME``: stop and restart a
  job's runs on every instance; ``schedule NAME SPEC [--timezone TZ]`` / ``schedule NAME --reset``: override its
  schedule on every instance, or go back to the code's (the same as ``python -m mutexcron``'s).
- ``schedules add NAME SPEC --target T [--kwargs JSON] | remove NAME | list [--json]``: run-time schedules
  (docs/schedules.md).
- ``backfill NAME START END [--by WHO]``: run each tick of a job's schedule from START to END (ISO-8601, read in
  the job's zone without an offset), each once across the fleet; exit 1 if a tick failed or it stopped early.

Each subcommand is one method decorated with :func:`subcommand`, which declares its arguments; the
method hands over to its module in ``mutexcron_django/management/subcommands/`` (``jobs``, ``foreground``,
``control``).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand

from mutexcron.ops.selection import LIST_OPTIONS, selection_of

from ..subcommands import arguments, control, foreground, jobs
from ..subcommands.arguments import Argument, Subcommand, argument, subcommand


class Command(BaseCommand):
    help = ("Inspect and operate mutexcron jobs and tasks: list, run, trigger, unlock, seed, prune, worker, health, "
            "pause, resume, schedule, schedules, backfill.")

    @classmethod
    def subcommands(cls) -> Iterator[tuple[Subcommand, str]]:
        """(subcommand, method name) in the order the methods are defined."""
        seen: set[str] = set()
        for klass in reversed(cls.__mro__):
            for attribute, value in vars(klass).items():
                spec = getattr(value, "subcommand", None)
                if isinstance(spec, Subcommand) and spec.name not in seen:
                    seen.add(spec.name)
                    yield spec, attribute

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        # Django's own options (-v, --settings, --traceback, ...) are the main parser's, added before this
        # runs; copy them into every subcommand so that `mutexcron run -v 2 --settings=x` works too. Their
        # default there is SUPPRESS: an option not given after the subcommand keeps the main parser's value.
        shared = []
        for action in parser._actions:
            if action.option_strings and action.dest not in ("help", "version"):
                copied = copy.copy(action)
                copied.default = argparse.SUPPRESS
                shared.append(copied)
        subparsers = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
        for spec, _ in self.subcommands():
            sub = subparsers.add_parser(spec.name, help=spec.help, description=spec.help)
            for arg in spec.arguments:
                sub.add_argument(*arg.flags, **arg.options)
            for action in shared:
                sub._add_action(action)

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        method = next(attribute for spec, attribute in self.subcommands() if spec.name == subcommand)
        getattr(self, method)(**options)

    @subcommand(
        "list",
        "Show every declared job (schedule, time zone, next fire, lock state) and orphan locks.",
        argument("--json", action="store_true", dest="as_json", help="Print JSON instead of a table."),
        *(argument(*flags, **options) for flags, options in LIST_OPTIONS),
    )
    def list_jobs(self, *, as_json: bool = False, **options: Any) -> None:
        jobs.list_jobs(self, as_json=as_json, selection=selection_of(options))

    @subcommand("run", "Run the scheduler in the foreground until SIGTERM or SIGINT (a dedicated cron process).")
    def run_scheduler(self, *, verbosity: int = 1, **_: Any) -> None:
        foreground.run_scheduler(self, verbosity=verbosity)

    @subcommand(
        "trigger",
        "Run a job now, under its lock, in this process; exit 1 if it failed or did not run.",
        argument("name", metavar="NAME", help="The job's name (see: manage.py mutexcron list)."),
    )
    def trigger(self, *, name: str, **_: Any) -> None:
        jobs.trigger(self, name)

    @subcommand(
        "unlock",
        "Force a job's lock open (whoever holds it); with --delete, remove an orphan lock's document.",
        argument("name", metavar="NAME", help="The job's (or orphan lock's) name."),
        argument("--delete", action="store_true",
                 help="Delete the lock document instead: for locks whose job is no longer declared."),
        argument("--force", action="store_true",
                 help="With --delete: delete even while the store says the lock's lease is live."),
    )
    def unlock(self, *, name: str, delete: bool = False, force: bool = False, **_: Any) -> None:
        jobs.unlock(self, name, delete=delete, force=force)

    @subcommand("seed", "Create the missing lock documents of the declared jobs (never resets one).")
    def seed(self, **_: Any) -> None:
        jobs.seed(self)

    @subcommand(
        "prune",
        "Delete run history older than MUTEXCRON['HISTORY_RETENTION'] (or --older-than DAYS).",
        argument("--older-than", type=arguments.days, metavar="DAYS", dest="older_than",
                 help="Delete runs that started more than DAYS days ago (fractions allowed) instead."),
    )
    def prune(self, *, older_than: float | None = None, **_: Any) -> None:
        jobs.prune(self, older_than=older_than)

    @subcommand(
        "worker",
        "Run a task worker in the foreground until SIGTERM or SIGINT (which stop it after the running task).",
        argument("--types", type=arguments.task_types, metavar="A,B",
                 help="Run only these task types (comma-separated); default: every registered one."),
        argument("--prefetch", type=arguments.prefetch, default=10, metavar="N",
                 help="Claim up to N due tasks at a time (default 10)."),
    )
    def worker(self, *, types: list[str] | None = None, prefetch: int = 10, verbosity: int = 1, **_: Any) -> None:
        foreground.worker(self, types=types, prefetch=prefetch, verbosity=verbosity)

    @subcommand(
        "health",
        "Exit 0 when the lock store answers and no declared job is overdue or failing; else exit 1, one line "
        "per problem.",
        argument("--json", action="store_true", dest="as_json", help="Print the report as JSON."),
    )
    def health(self, *, as_json: bool = False, **_: Any) -> None:
        jobs.health(self, as_json=as_json)

    @control.declared("pause")
    def pause(self, **options: Any) -> None:
        control.control(self, "pause", options)

    @control.declared("resume")
    def resume(self, **options: Any) -> None:
        control.control(self, "resume", options)

    @control.declared("schedule")
    def schedule(self, **options: Any) -> None:
        control.control(self, "schedule", options)

    @control.declared("schedules")
    def schedules(self, **options: Any) -> None:
        control.control(self, "schedules", options)

    @control.declared("backfill")
    def backfill(self, **options: Any) -> None:
        control.control(self, "backfill", options)


__all__ = ["Argument", "Command", "argument", "subcommand"]
