"""``python -m mutexcron``: pause, resume, re-schedule, backfill and list the jobs of a lock store, without Django.

The subcommands' arguments, the parsing of ``--for`` and ``--until`` and the actions themselves live here
once; ``manage.py mutexcron`` declares the same arguments from :data:`CONTROL` and runs :func:`run_control`.
Exit status: 0 done, 1 unknown job, store unreachable or bad spec (or a backfill with a failed tick, or stopped
early), 2 a usage error; errors are one line on stderr, with the store URL's password masked.
"""

from __future__ import annotations

import argparse
import getpass
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, NoReturn, TextIO

from . import schedule_commands
from ._options import MAX_DURATION
from .errors import (
    ControlNotSupported,
    CronSpecError,
    SchedulerConfigError,
    StoreConfigError,
    StoreUnavailable,
    UnknownJobError,
)
from .ops.listing import listing_json, listing_text, read_listing, when
from .ops.selection import LIST_OPTIONS, select, selection_of
from .records import Outcome, RunRecord
from .registry import default_registry
from .scheduling.backfill import effective_trigger
from .scheduling.scheduler import Scheduler
from .stores import LockState
from .urls import scrub

__all__ = ["CONTROL", "Failure", "UsageError", "build_parser", "main", "parse_duration", "parse_until",
           "run_control"]

STORE_ENV = "MUTEXCRON_STORE"  # the --store default: keeps a password out of the process list
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class UsageError(Exception):
    """Options that do not go together, or a value no command could take (exit 2)."""


class Failure(Exception):
    """The action could not be done: unknown job, store unreachable, bad spec or zone (exit 1)."""


def parse_duration(text: str) -> timedelta:
    """``--for``: ``90s``, ``15m``, ``2h30m``, ``1d``, ``1d12h`` (units d, h, m, s, largest first); > 0."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write it like 90s, 15m, 2h30m or 1d")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = seconds + 60 * (minutes + 60 * (hours + 24 * days))
    if total <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is no time at all; give a duration longer than 0")
    if total > MAX_DURATION.total_seconds():
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {MAX_DURATION.days} days; pause without "
                                         "--for and resume by hand instead")
    return timedelta(seconds=total)


def parse_until(text: str) -> datetime:
    """``--until``: an ISO-8601 time in the future; one without a UTC offset is read as UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time such as 2030-01-31T18:00:00+01:00 "
                                         "(without an offset it is UTC)") from None
    if value.utcoffset() is None:
        value = value.replace(tzinfo=UTC)
    now = datetime.now(UTC)
    if value <= now:
        raise argparse.ArgumentTypeError(f"{text!r} is in the past (it is {when(now)} now); give a later time")
    return value.astimezone(UTC)


def os_user() -> str | None:
    """Who runs this command, for ``by`` (None where the OS cannot say)."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):
        return None


@dataclass(frozen=True)
class Action:
    """A control subcommand: its help and its ``add_argument(*flags, **options)`` calls."""

    help: str
    arguments: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]


def _arg(*flags: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, options


_NAME = _arg("name", metavar="NAME", help="The job's name (see the list subcommand).")
_BY = _arg("--by", metavar="WHO", help="Who makes the change, as recorded with it (default: the OS user).")
CONTROL: dict[str, Action] = {
    "pause": Action(
        "Pause a job on every instance: once this returns no run of it starts (a running one goes on) until "
        "resume, or until --until / --for.",
        (_NAME,
         _arg("--until", type=parse_until, metavar="ISO-8601",
              help="End the pause by itself at this time, e.g. 2030-01-31T18:00+01:00; a time without a UTC "
                   "offset is read as UTC. Not with --for."),
         _arg("--for", type=parse_duration, dest="duration", metavar="DURATION",
              help="End the pause by itself after this long: 90s, 15m, 2h30m, 1d. Not with --until."),
         _arg("--note", metavar="TEXT",
              help="Why, kept with the pause until resume and shown by list and the admin (at most 1,000 "
                   "characters)."),
         _BY)),
    "resume": Action("Lift a job's pause on every instance; the ticks it skipped are not caught up.", (_NAME,)),
    "schedule": Action(
        "Replace a job's schedule on every instance (they follow within their sync interval), or with --reset "
        "go back to the code's.",
        (_NAME,
         _arg("spec", nargs="?", metavar="SPEC", help='The new cron spec, quoted: "*/5 * * * *".'),
         _arg("--timezone", metavar="TZ", help="The zone SPEC is read in (an IANA name; default: the job's)."),
         _arg("--reset", action="store_true", help="Go back to the schedule in the code (no SPEC)."),
         _BY)),
    "schedules": Action(
        "Add, remove or list run-time schedules: jobs stored in the lock store that call an allowed target "
        "(@callable_target); every instance follows them within its sync interval.",
        (*schedule_commands.ARGUMENTS, _BY)),
    "backfill": Action(
        "Run each tick of a job's schedule from START (included) to END (excluded), oldest first, in this "
        "process, each once across the fleet (the same range run again runs only the ticks not run yet); print "
        "how many ran. Exit 1 if a tick failed or the backfill stopped early (a paused job).",
        (_NAME,
         _arg("start", metavar="START", help="ISO-8601, e.g. 2030-01-31T00:00+01:00; without an offset it is read "
                                             "in the job's zone."),
         _arg("end", metavar="END", help="ISO-8601, excluded; without an offset it is read in the job's zone."),
         _BY)),
}


def run_control(scheduler: Scheduler, action: str, options: dict[str, Any]) -> str:
    """Do ``action`` (a key of :data:`CONTROL`) with the parsed ``options``; return what to print.

    Raises :class:`UsageError` or :class:`Failure` with a one-line message."""
    name: str = options["name"]
    by = options.get("by") or os_user()
    try:
        if action == "schedules":
            return schedule_commands.run_schedules(scheduler, options, by)
        if action == "pause":
            until, duration = options.get("until"), options.get("duration")
            if until is not None and duration is not None:
                raise UsageError("--until and --for do not go together; give one of them")
            if duration is not None:
                until = scheduler.store.now() + duration  # the store's clock, as the admin's "for" does
            return _paused(scheduler.pause(name, until=until, by=by, note=options.get("note")))
        if action == "backfill":
            return _backfill(scheduler, name, options["start"], options["end"], by)
        if action == "resume":
            scheduler.resume(name)
            return f"resumed job {name!r} on every instance (the ticks it skipped are not caught up)"
        spec, zone, reset = options.get("spec"), options.get("timezone"), options.get("reset", False)
        if reset:
            if spec is not None or zone is not None:
                raise UsageError("--reset takes no SPEC and no --timezone")
            return _rescheduled(scheduler, scheduler.reset_schedule(name, by=by))
        if spec is None:
            raise UsageError('give the new SPEC (quoted: "*/5 * * * *") or --reset')
        return _rescheduled(scheduler, scheduler.set_schedule(name, spec, timezone=zone, by=by))
    except StoreUnavailable as error:
        raise Failure(f"the lock store {scheduler.store!r} cannot be reached: {error}") from None
    except (UnknownJobError, CronSpecError, ControlNotSupported) as error:
        raise Failure(str(error)) from None
    except ValueError as error:
        raise UsageError(str(error)) from None


def parse_time(text: str, zone: tzinfo, argument: str) -> datetime:
    """A backfill's START or END: ISO-8601; one without a UTC offset is read in ``zone`` (the job's)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"{argument} {text!r} is not an ISO-8601 time such as 2030-01-31T18:00:00+01:00 (without "
                         f"an offset it is read in the job's zone, {zone})") from None
    return value if value.utcoffset() is not None else value.replace(tzinfo=zone)


def _backfill(scheduler: Scheduler, name: str, start: str, end: str, by: str | None) -> str:
    """Backfill job ``name`` and say what ran; Failure (exit 1, the same words) if a tick failed or it stopped."""
    zone = effective_trigger(scheduler.store, scheduler.registry.get(name), scheduler.timezone).timezone
    first, last = parse_time(start, zone, "START"), parse_time(end, zone, "END")
    records: list[RunRecord] = []
    listener = scheduler.add_listener(lambda record: records.append(record) if record.backfill else None)
    try:
        ran = scheduler.backfill(name, first, last, by=by)
    finally:
        scheduler.remove_listener(listener)
    failed = sum(record.outcome in (Outcome.FAILED, Outcome.TIMED_OUT) for record in records)
    taken = sum(record.outcome is Outcome.SKIPPED_ALREADY_RAN for record in records)
    # A backfill that went on after a skip (a wait for the job's lock while another backfill of the range ticked
    # on) did not stop there: only a skip that is its last record stopped it.
    final = records[-1] if records else None
    stop = final if final is not None and final.outcome is not None and not final.outcome.ran and (
        final.outcome is not Outcome.SKIPPED_ALREADY_RAN) else None
    message = (f"job {name!r}: backfill from {first.isoformat()} to {last.isoformat()} ran {ran} tick(s)"
               f"{f', {failed} failed' if failed else ''}"
               f"{f'; {taken} already run by a backfill of this range' if taken else ''}")
    if stop is not None:
        message += f"; stopped at {stop.fire_time.isoformat()}: {stop.error or stop.outcome}"
    if failed or stop is not None:
        raise Failure(message)
    return message


def _paused(state: LockState) -> str:
    until = f"until {when(state.paused_until)}" if state.paused_until else "until resumed"
    by = f" (by {state.paused_by})" if state.paused_by else ""
    note = f": {state.pause_note}" if state.pause_note else ""
    return f"paused job {state.name!r} on every instance {until}{by}{note}"


def _rescheduled(scheduler: Scheduler, state: LockState) -> str:
    code = scheduler.registry.get(state.name).spec if state.name in scheduler.registry else None
    version = f"schedule version {state.schedule_version}"
    if state.schedule is None:
        return f"job {state.name!r} is back on the code's schedule{f' {str(code)!r}' if code else ''} ({version})"
    zone = f" in {state.schedule_timezone}" if state.schedule_timezone else ""
    return (f"job {state.name!r} now fires on {state.schedule!r}{zone} on every instance ({version}"
            f"{f'; the code says {str(code)!r}' if code else ''})")


# -- python -m mutexcron ----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr (exit 2), pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def _common_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """--store, --app and --scheduler-timezone, which go before the subcommand or after it. The main parser holds
    the defaults; a subcommand's parser sets only what it is given (its --app modules are added to the main's)."""
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--store", default=default(os.environ.get(STORE_ENV)), metavar="URL",
                        help=f"The lock store's URL: redis://…, mongodb://…, a dotted path to a LockStore class "
                             f"(default: ${STORE_ENV}, which keeps a password out of the process list).")
    parser.add_argument("--app", action="append", default=default([]), dest="apps" if defaults else "more_apps",
                        metavar="MODULE", help="Import this module, which declares jobs with @mutex_cron (repeatable).")
    parser.add_argument("--scheduler-timezone", default=default("UTC"), metavar="TZ",
                        help="The zone the schedulers run jobs without one in (their timezone=; default UTC).")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m mutexcron``."""
    parser = _Parser(prog="python -m mutexcron",
                     description="Pause, resume, re-schedule, backfill and list mutexcron jobs in a lock store.")
    _common_options(parser, defaults=True)
    subparsers = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for name, action in CONTROL.items():
        sub = subparsers.add_parser(name, help=action.help, description=action.help)
        _common_options(sub, defaults=False)
        for flags, options in action.arguments:
            sub.add_argument(*flags, **options)
    listing = subparsers.add_parser("list", help="Show every job and lock of the store.",
                                    description="Show the --app modules' jobs (schedule they fire on, next fire, "
                                                "lock, pause, override) and the store's other locks.")
    _common_options(listing, defaults=False)
    listing.add_argument("--json", action="store_true", dest="as_json", help="Print JSON instead of a table.")
    for flags, options in LIST_OPTIONS:
        listing.add_argument(*flags, **options)
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run ``python -m mutexcron`` with ``argv``; the exit status."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    if not logging.getLogger().hasHandlers():  # the action's log line would repeat what is printed
        logging.getLogger("mutexcron").addHandler(logging.NullHandler())
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error
    url = args.store if isinstance(args.store, str) else ""

    def fail(status: int, message: str) -> int:
        err.write(f"python -m mutexcron {args.subcommand}: error: {scrub(message, url) if url else message}\n")
        return status

    if not url:
        return fail(2, f"give the lock store with --store URL or ${STORE_ENV}")
    for module in [*args.apps, *getattr(args, "more_apps", [])]:
        try:
            importlib.import_module(module)
        except Exception as error:  # the user's module: any error in it is theirs to see
            return fail(2, f"--app {module!r} cannot be imported: {type(error).__name__}: {error}")
    try:
        scheduler = Scheduler(url, registry=default_registry, timezone=args.scheduler_timezone)
    except (StoreConfigError, SchedulerConfigError) as error:
        return fail(2, str(error))
    try:
        if args.subcommand == "list":
            return _list(scheduler, vars(args), out=out, fail=fail)
        message = run_control(scheduler, args.subcommand, vars(args))
    except UsageError as error:
        return fail(2, str(error))
    except Failure as error:
        return fail(1, str(error))
    finally:
        scheduler.shutdown()
    out.write(scrub(message, url) + "\n")
    return 0


def _list(scheduler: Scheduler, options: dict[str, Any], *, out: TextIO, fail: Callable[[int, str], int]) -> int:
    try:
        listing = read_listing(scheduler.store, scheduler.registry, scheduler.timezone, datetime.now(UTC))
    except ControlNotSupported as error:
        return fail(1, str(error))
    listing = select(listing, selection_of(options))
    if options["as_json"]:
        out.write(json.dumps(listing_json(listing), indent=2) + "\n")
    else:
        out.write(listing_text(
            listing, command="python -m mutexcron",
            no_jobs="No jobs declared (give the modules that declare them with --app MODULE).",
            orphans="Locks of no declared job (their jobs are in no --app module, or were removed):") + "\n")
    if listing.error is not None:
        return fail(1, f"the lock store {listing.store} cannot be reached: {listing.error}")
    return 0
