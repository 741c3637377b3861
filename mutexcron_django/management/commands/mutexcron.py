"""``manage.py mutexcron <subcommand>``: inspect and operate the declared jobs and their locks.

- ``list [--json]``: every declared job (schedule, time zone, next fire, lock state) and orphan locks.
- ``run``: a foreground scheduler for a dedicated process; SIGTERM or SIGINT stops it cleanly.
- ``trigger NAME``: run a job now under its lock; fails (exit 1) if the job failed or did not run.
- ``unlock NAME [--delete [--force]]``: free a job's lock (an operator's action); ``--delete`` hides an orphan's.
- ``seed``: create the missing lock documents; ``prune [--older-than DAYS]``: delete old run history.
- ``worker [--types A,B] [--prefetch N]``: a foreground task worker; SIGTERM or SIGINT stops it cleanly.

Each subcommand is one method decorated with :func:`subcommand`; its arguments are declared in the
decorator, so adding one (``worker``, say) is adding one method.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone as django_timezone

from mutexcron import Job, Outcome, RunRecord, default_registry, next_fire_times
from mutexcron.cron import resolve_timezone
from mutexcron.errors import LockBusy, StoreUnavailable, UnknownJobError
from mutexcron.stores import LockState, LockStore

from ... import runtime
from ...conf import get_settings
from ...models import JobRun

SubcommandMethod = Callable[..., None]


@dataclass(frozen=True)
class Argument:
    flags: tuple[str, ...]
    options: dict[str, Any]


def argument(*flags: str, **options: Any) -> Argument:
    """One ``add_argument(*flags, **options)`` of a subcommand."""
    return Argument(flags, options)


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    arguments: tuple[Argument, ...]


def subcommand(name: str, help: str, *arguments: Argument) -> Callable[[SubcommandMethod], SubcommandMethod]:
    """Make a ``Command`` method the handler of ``manage.py mutexcron <name>``; it gets the parsed options."""

    def decorate(method: SubcommandMethod) -> SubcommandMethod:
        method.subcommand = Subcommand(name, help, arguments)  # type: ignore[attr-defined]
        return method

    return decorate


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # how `run` and `worker` are stopped


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not days >= 0 or days == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of days >= 0")
    return days


def _task_types(text: str) -> list[str]:
    types = [name.strip() for name in text.split(",") if name.strip()]
    if not types:
        raise argparse.ArgumentTypeError(f"{text!r} names no task type (give A,B)")
    return list(dict.fromkeys(types))


def _prefetch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _when(value: datetime | None, zone: tzinfo = UTC) -> str:
    if value is None:
        return "-"
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * width for width in widths], *rows]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def _lock_state(state: LockState | None, now: datetime) -> str:
    """``held`` (a live lease), ``expired`` (taken, lease ran out), ``free``, or ``unseeded`` (no document)."""
    if state is None:
        return "unseeded"
    if state.is_held(now):
        return "held"
    return "expired" if state.locked else "free"


class Command(BaseCommand):
    help = "Inspect and operate mutexcron jobs and tasks: list, run, trigger, unlock, seed, prune, worker."

    # -- plumbing -----------------------------------------------------------------------------------

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

    def _store(self) -> LockStore:
        return get_settings().build_store()

    def _job(self, name: str) -> Job:
        try:
            return default_registry.get(name)
        except UnknownJobError as error:
            raise CommandError(str(error)) from None

    # -- list -----------------------------------------------------------------------------------------

    @subcommand(
        "list",
        "Show every declared job (schedule, time zone, next fire, lock state) and orphan locks.",
        argument("--json", action="store_true", dest="as_json", help="Print JSON instead of a table."),
    )
    def list_jobs(self, *, as_json: bool = False, **_: Any) -> None:
        conf = get_settings()
        default_zone = resolve_timezone(conf.timezone)
        now = django_timezone.now()
        store = conf.build_store()
        store_error: str | None = None
        locks: dict[str, LockState] = {}
        store_now = now
        try:
            locks = {state.name: state for state in store.locks()}
            store_now = store.now()
        except StoreUnavailable as error:
            store_error = str(error)
        finally:
            store.close()

        jobs = []
        for job in default_registry:
            zone = job.timezone or default_zone
            (next_fire,) = next_fire_times(job.spec, after=now, timezone=zone) or (None,)
            state = locks.get(job.name)
            jobs.append((job, zone, next_fire, state))
        orphans = [state for name, state in sorted(locks.items()) if name not in default_registry]

        if as_json:
            self.stdout.write(json.dumps({
                "store": repr(store),
                "store_error": store_error,
                "timezone": str(default_zone),
                "jobs": [{
                    "name": job.name,
                    "spec": str(job.spec),
                    "timezone": str(zone),
                    "next_fire": next_fire.astimezone(zone).isoformat() if next_fire else None,
                    "lock": None if store_error else self._lock_json(state, store_now),
                } for job, zone, next_fire, state in jobs],
                "orphan_locks": [self._lock_json(state, store_now) for state in orphans],
            }, indent=2))
        else:
            self._print_list(store, jobs, orphans, store_now, store_error)
        if store_error is not None:
            raise CommandError(f"the lock store {store!r} cannot be reached: {store_error}")

    @staticmethod
    def _lock_json(state: LockState | None, now: datetime) -> dict[str, Any]:
        fields: dict[str, Any] = {"state": _lock_state(state, now)}
        if state is not None:
            fields.update(
                name=state.name,
                locked=state.locked,
                held=state.is_held(now),
                locked_by=state.locked_by,
                lock_until=_iso(state.lock_until),
                last_fire_time=_iso(state.last_fire_time),
                last_locked_at=_iso(state.last_locked_at),
                last_released_at=_iso(state.last_released_at),
                token=state.token,
            )
        return fields

    def _print_list(self, store: LockStore, jobs: list[tuple[Job, tzinfo, datetime | None, LockState | None]],
                    orphans: list[LockState], now: datetime, store_error: str | None) -> None:
        self.stdout.write(f"Store: {store!r}")
        if not jobs:
            modules = ", ".join(get_settings().modules)
            self.stdout.write(f"No jobs declared (looked for @mutex_cron in the installed apps' modules: {modules}).")
        else:
            rows = []
            for job, zone, next_fire, state in jobs:
                known = None if store_error else state
                taken = known is not None and known.locked
                rows.append([
                    job.name, str(job.spec), str(zone), _when(next_fire, zone),
                    "unknown" if store_error else _lock_state(state, now),
                    (known.locked_by or "-") if known is not None and taken else "-",
                    _when(known.lock_until) if known is not None and taken else "-",
                    _when(known.last_fire_time) if known is not None else "-",
                ])
            headers = ["JOB", "SCHEDULE", "TIMEZONE", "NEXT FIRE", "LOCK", "HOLDER", "LEASE UNTIL", "LAST FIRE"]
            self.stdout.write(_table(headers, rows))
        if orphans:
            self.stdout.write("")
            self.stdout.write("Orphan locks (no declared job; remove with: manage.py mutexcron unlock --delete NAME):")
            rows = [[state.name, _lock_state(state, now), (state.locked_by or "-") if state.locked else "-",
                     _when(state.lock_until) if state.locked else "-", _when(state.last_fire_time)]
                    for state in orphans]
            self.stdout.write(_table(["LOCK NAME", "LOCK", "HOLDER", "LEASE UNTIL", "LAST FIRE"], rows))

    # -- run ------------------------------------------------------------------------------------------

    @subcommand("run", "Run the scheduler in the foreground until SIGTERM or SIGINT (a dedicated cron process).")
    def run_scheduler(self, *, verbosity: int = 1, **_: Any) -> None:
        with self._foreground("run", verbosity) as (stop, received):
            scheduler = runtime.start()
            self.stdout.write(
                f"mutexcron scheduler {scheduler.instance_id} running {len(scheduler.registry)} job(s) on "
                f"{scheduler.store!r} (time zone {scheduler.timezone}); stop with SIGTERM or Ctrl-C"
            )
            self.stdout.flush()
            while not stop.wait(0.5):
                pass
            timeout = scheduler.shutdown_timeout.total_seconds()
            self.stdout.write(
                f"mutexcron: {signal.Signals(received[0]).name} received; stopping scheduler "
                f"{scheduler.instance_id} (waiting up to {timeout:g}s for running jobs)"
            )
            self.stdout.flush()
            runtime.stop()
        still_running = scheduler.running_jobs()  # bodies that outlived the shutdown timeout
        if still_running:
            message = (f"job(s) {', '.join(still_running)} still running after {timeout:g}s; exiting anyway, "
                       "their locks expire with their lease")
            if self._called_from_command_line:
                # Python would otherwise wait at exit for the job threads, past the bound.
                self.stderr.write(f"mutexcron: {message}")
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)
            raise CommandError(message)
        self.stdout.write(f"mutexcron: scheduler {scheduler.instance_id} stopped")

    @contextlib.contextmanager
    def _foreground(self, command: str, verbosity: int) -> Iterator[tuple[threading.Event, list[int]]]:
        """While the block runs: SIGTERM and SIGINT set the yielded event (and are listed, first first), and
        mutexcron's log goes to stderr unless the project configured logging. Both are undone after."""
        stop = threading.Event()
        received: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            received.append(signum)  # nothing else here: printing from a signal handler can re-enter I/O
            stop.set()

        try:
            previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
        except ValueError:  # signal handlers can only be installed in the main thread
            raise CommandError(f"mutexcron {command} must run in the main thread (it stops on SIGTERM/SIGINT)") \
                from None
        logger = logging.getLogger("mutexcron")
        level = logger.level
        log_handler = self._log_to_stderr(logger, verbosity)
        try:
            yield stop, received
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if log_handler is not None:
                logger.removeHandler(log_handler)
                logger.setLevel(level)

    @staticmethod
    def _log_to_stderr(logger: logging.Logger, verbosity: int) -> logging.Handler | None:
        """Show mutexcron's log (runs, skips, store outages) on stderr unless the project configured logging."""
        if logger.hasHandlers():
            return None
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.setLevel(logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG)
        if logger.level == logging.NOTSET or logger.level > handler.level:
            logger.setLevel(handler.level)
        logger.addHandler(handler)
        return handler

    # -- trigger --------------------------------------------------------------------------------------

    @subcommand(
        "trigger",
        "Run a job now, under its lock, in this process; exit 1 if it failed or did not run.",
        argument("name", metavar="NAME", help="The job's name (see: manage.py mutexcron list)."),
    )
    def trigger(self, *, name: str, **_: Any) -> None:
        self._job(name)
        try:
            record = runtime.run_now(name)
        except LockBusy as error:
            holder = error.record.error if isinstance(error.record, RunRecord) and error.record.error else ""
            raise CommandError(f"job {name!r} did not run: {error}{f' ({holder})' if holder else ''}") from None
        self._report(record)

    def _report(self, record: RunRecord) -> None:
        took = (record.finished_at - record.started_at).total_seconds() if record.finished_at else 0.0
        where = f"on {record.instance_id}"
        if record.outcome is Outcome.SUCCEEDED:
            lost = " (its lock was lost while it ran)" if record.lock_lost else ""
            self.stdout.write(f"job {record.job_name!r} succeeded in {took:.3f}s {where} (token {record.token}){lost}")
            return
        if record.outcome is Outcome.FAILED:
            error = (record.error or "").rstrip()
            self.stderr.write(error)
            raise CommandError(f"job {record.job_name!r} failed after {took:.3f}s {where}: "
                               f"{error.splitlines()[-1] if error else 'unknown error'}")
        raise CommandError(f"job {record.job_name!r} did not run: {record.outcome}: {record.error}")

    # -- unlock ---------------------------------------------------------------------------------------

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
        store = self._store()
        try:
            state = store.lock(name)
            declared = name in default_registry
            if state is None and not declared:
                orphans = [s.name for s in store.locks() if s.name not in default_registry]
                raise CommandError(
                    f"no job named {name!r} is declared and no lock has that name "
                    f"(declared jobs: {', '.join(default_registry.names()) or 'none'}; "
                    f"orphan locks: {', '.join(orphans) or 'none'})"
                )
            if delete:
                if declared:
                    raise CommandError(
                        f"job {name!r} is declared: --delete is for orphan locks (its scheduler would bring the "
                        f"document back at its next fire); to free it use: mutexcron unlock {name}"
                    )
                if state is not None and state.is_held(store.now()) and not force:
                    raise CommandError(
                        f"lock {name!r} is held by {state.locked_by or 'unknown'} until {_when(state.lock_until)} "
                        "(store clock): its job may still run somewhere; wait for the lease to end, or pass --force "
                        "(the lease stays in force after the delete either way)"
                    )
                store.delete(name)
                self.stdout.write(f"deleted the orphan lock {name!r} from {store!r}")
                return
            holder = state.locked_by if state is not None and state.locked else None
            if store.force_unlock(name):
                self.stdout.write(f"unlocked {name!r} (was held by {holder or 'unknown'})")
            else:
                self.stdout.write(f"{name!r} was not locked; nothing to do")
        except StoreUnavailable as error:
            raise CommandError(f"the lock store {store!r} cannot be reached: {error}") from None
        finally:
            store.close()

    # -- seed -----------------------------------------------------------------------------------------

    @subcommand("seed", "Create the missing lock documents of the declared jobs (never resets one).")
    def seed(self, **_: Any) -> None:
        store = self._store()
        names = default_registry.names()
        try:
            created = store.seed(names)
        except StoreUnavailable as error:
            raise CommandError(f"the lock store {store!r} cannot be reached: {error}") from None
        finally:
            store.close()
        self.stdout.write(f"created {created} lock(s) for {len(names)} declared job(s) in {store!r}")

    # -- prune ----------------------------------------------------------------------------------------

    @subcommand(
        "prune",
        "Delete run history older than MUTEXCRON['HISTORY_RETENTION'] (or --older-than DAYS).",
        argument("--older-than", type=_days, metavar="DAYS", dest="older_than",
                 help="Delete runs that started more than DAYS days ago (fractions allowed) instead."),
    )
    def prune(self, *, older_than: float | None = None, **_: Any) -> None:
        retention = get_settings().history_retention if older_than is None else timedelta(days=older_than)
        if retention is None:
            self.stdout.write("MUTEXCRON['HISTORY_RETENTION'] is None (history is kept forever): nothing pruned; "
                              "use --older-than DAYS to prune anyway")
            return
        cutoff = django_timezone.now() - retention
        try:
            deleted, _ = JobRun.objects.filter(started_at__lt=cutoff).delete()
        except DatabaseError as error:
            raise CommandError(f"could not prune the run history: {error}") from None
        self.stdout.write(f"deleted {deleted} run(s) that started before {_when(cutoff)} (older than {retention})")


    # -- worker ---------------------------------------------------------------------------------------

    @subcommand(
        "worker",
        "Run a task worker in the foreground until SIGTERM or SIGINT (which stop it after the running task).",
        argument("--types", type=_task_types, metavar="A,B",
                 help="Run only these task types (comma-separated); default: every registered one."),
        argument("--prefetch", type=_prefetch, default=10, metavar="N",
                 help="Claim up to N due tasks at a time (default 10)."),
    )
    def worker(self, *, types: list[str] | None = None, prefetch: int = 10, verbosity: int = 1, **_: Any) -> None:
        from django.core.exceptions import ImproperlyConfigured

        from mutexcron.errors import MutexcronError
        from mutexcron.urls import scrub

        from ...tasks import get_task_queue

        conf = get_settings().tasks
        try:
            queue = get_task_queue()
        except ImproperlyConfigured as error:
            raise CommandError(str(error)) from None
        registered = queue.handlers.types()
        if types is None:
            if not registered:
                raise CommandError(
                    "no task handlers are registered (looked for @task_handler in the installed apps' modules: "
                    f"{', '.join(conf.modules)}; see MUTEXCRON['TASKS']['MODULES'])"
                )
            types = registered
        unknown = [name for name in types if name not in queue.handlers]
        if unknown:
            raise CommandError(f"unknown task type(s) {', '.join(unknown)}; registered: "
                               f"{', '.join(registered) or 'none'}")

        def masked(text: str) -> str:
            for url in conf.urls:
                text = scrub(text, url)
            return text

        failure: list[BaseException] = []

        def consume() -> None:
            try:
                queue.run_worker(types, prefetch=prefetch)
            except BaseException as error:  # reported by the main thread
                failure.append(error)
            finally:
                stop.set()

        thread = threading.Thread(target=consume, name="mutexcron-task-worker", daemon=True)
        with self._foreground("worker", verbosity) as (stop, received):
            self.stdout.write(
                f"mutexcron task worker {queue.worker_id} running {', '.join(types)} on "
                f"{masked(repr(queue.backend))} (prefetch {prefetch}); stop with SIGTERM or Ctrl-C"
            )
            self.stdout.flush()
            thread.start()
            while not stop.wait(0.5):
                pass
            if received:
                self.stdout.write(f"mutexcron: {signal.Signals(received[0]).name} received; stopping task worker "
                                  f"{queue.worker_id} after the task it is running")
                self.stdout.flush()
            # A second signal while the running task finishes: leave at once; the task comes back after its
            # visibility timeout (the claim was not released), to this or another worker.
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._leave_now)
            while thread.is_alive():
                queue.stop(timeout=0)  # again until it stops: run_worker may have cleared an early stop
                thread.join(0.5)
        if failure:
            error = failure[0]
            if isinstance(error, MutexcronError | ImproperlyConfigured):
                raise CommandError(f"the task worker stopped: {masked(str(error))}") from None
            raise error
        self.stdout.write(f"mutexcron: task worker {queue.worker_id} stopped")

    def _leave_now(self, signum: int, frame: object) -> None:
        sys.stderr.write(f"mutexcron: {signal.Signals(signum).name} received again; exiting without waiting for "
                         "the running task (it runs again after its visibility timeout)\n")
        sys.stderr.flush()
        os._exit(1)


__all__ = ["Command", "argument", "subcommand"]
