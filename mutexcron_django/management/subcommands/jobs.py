"""The subcommands that inspect and operate the declared jobs, their locks and their history: ``list``,
``health``, ``trigger``, ``unlock``, ``seed`` and ``prune``. Each is a function of the running command (for its
output streams); a store it builds from a URL is closed before it returns (a LockStore object of the settings is the
user's, and stays open)."""

from __future__ import annotations

import json
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone as django_timezone

from mutexcron import Outcome, RunRecord, default_registry
from mutexcron.cron import resolve_timezone
from mutexcron.errors import ControlNotSupported, LockBusy, StoreUnavailable, UnknownJobError
from mutexcron.ops.listing import listing_json, listing_text, read_listing
from mutexcron.ops.selection import Selection, select
from mutexcron.stores import LockStore, require_control

from ... import history, runtime
from ...conf import get_settings
from ...health import health_json, health_report
from .output import when


def _unreachable(store: LockStore, error: StoreUnavailable) -> CommandError:
    return CommandError(f"the lock store {store!r} cannot be reached: {error}")


# -- list -------------------------------------------------------------------------------------------------


def list_jobs(command: BaseCommand, *, as_json: bool, selection: Selection) -> None:
    """The declared jobs ``selection`` chooses (schedule it fires on, time zone, next fire, lock state, pause and
    override) and the orphan locks."""
    conf = get_settings()
    with conf.open_store() as store:
        try:
            listing = read_listing(store, default_registry, resolve_timezone(conf.timezone), django_timezone.now())
        except ControlNotSupported as error:
            raise CommandError(str(error)) from None
    listing = select(listing, selection)
    if as_json:
        command.stdout.write(json.dumps(listing_json(listing), indent=2))
    else:
        modules = ", ".join(conf.modules)
        command.stdout.write(listing_text(
            listing, command="manage.py mutexcron",
            no_jobs=f"No jobs declared (looked for @mutex_cron in the installed apps' modules: {modules}).",
            orphans="Orphan locks (no declared job; remove with: manage.py mutexcron unlock --delete NAME):"))
    if listing.error is not None:
        raise CommandError(f"the lock store {listing.store} cannot be reached: {listing.error}")


# -- health -----------------------------------------------------------------------------------------------


def health(command: BaseCommand, *, as_json: bool) -> None:
    """Exit 0 when healthy; else CommandError (exit 1) after one line per problem on stdout."""
    try:
        report = health_report()
    except ControlNotSupported as error:
        raise CommandError(str(error)) from None
    if as_json:
        command.stdout.write(health_json(report))
    elif report.ok:
        command.stdout.write(f"ok: {report.jobs} job(s) on {report.store}, none overdue or failing")
    else:
        for line in report.lines():
            command.stdout.write(line)
    if not report.ok:
        raise CommandError(f"unhealthy: {len(report.lines())} problem(s)")


# -- trigger ----------------------------------------------------------------------------------------------


def trigger(command: BaseCommand, name: str) -> None:
    """Run job ``name`` now under its lock; CommandError (exit 1) unless it ran and succeeded."""
    try:
        record = runtime.run_now(name)  # a declared job, or a run-time schedule of the store
    except UnknownJobError as error:
        raise CommandError(str(error)) from None
    except LockBusy as error:
        holder = error.record.error if isinstance(error.record, RunRecord) and error.record.error else ""
        raise CommandError(f"job {name!r} did not run: {error}{f' ({holder})' if holder else ''}") from None
    _report(command, record)


def _report(command: BaseCommand, record: RunRecord) -> None:
    took = (record.finished_at - record.started_at).total_seconds() if record.finished_at else 0.0
    where = f"on {record.instance_id}"
    if record.outcome is Outcome.SUCCEEDED:
        lost = " (its lock was lost while it ran)" if record.lock_lost else ""
        command.stdout.write(f"job {record.job_name!r} succeeded in {took:.3f}s {where} (token {record.token}){lost}")
        return
    if record.outcome is Outcome.ENQUEUED:
        command.stdout.write(f"job {record.job_name!r} enqueued {where} as task {record.task_id} (token "
                             f"{record.token}): a task worker runs it")
        return
    if record.outcome in (Outcome.FAILED, Outcome.TIMED_OUT):
        error = (record.error or "").rstrip()
        command.stderr.write(error)
        verb = "timed out" if record.outcome is Outcome.TIMED_OUT else "failed"
        raise CommandError(f"job {record.job_name!r} {verb} after {took:.3f}s {where}: "
                           f"{error.splitlines()[-1] if error else 'unknown error'}")
    raise CommandError(f"job {record.job_name!r} did not run: {record.outcome}: {record.error}")


# -- unlock, seed ---------------------------------------------------------------------------------------


def unlock(command: BaseCommand, name: str, *, delete: bool, force: bool) -> None:
    """Force lock ``name`` open; with ``delete``, remove an orphan lock's document (``force``: even held)."""
    with get_settings().open_store() as store:
        try:
            controls = require_control(store, f"{'delete' if delete else 'force-unlock'} the lock {name!r}")
            state = controls.lock(name)
            declared = name in default_registry
            if state is None and not declared:
                orphans = [s.name for s in controls.locks() if s.name not in default_registry]
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
                        f"lock {name!r} is held by {state.locked_by or 'unknown'} until {when(state.lock_until)} "
                        "(store clock): its job may still run somewhere; wait for the lease to end, or pass --force "
                        "(the lease stays in force after the delete either way)"
                    )
                controls.delete(name)
                command.stdout.write(f"deleted the orphan lock {name!r} from {store!r}")
                return
            holder = state.locked_by if state is not None and state.locked else None
            if controls.force_unlock(name):
                command.stdout.write(f"unlocked {name!r} (was held by {holder or 'unknown'})")
            else:
                command.stdout.write(f"{name!r} was not locked; nothing to do")
        except StoreUnavailable as error:
            raise _unreachable(store, error) from None
        except ControlNotSupported as error:
            raise CommandError(str(error)) from None


def seed(command: BaseCommand) -> None:
    """Create the missing lock documents of the declared jobs."""
    names = default_registry.names()
    with get_settings().open_store() as store:
        try:
            created = store.seed(names)
        except StoreUnavailable as error:
            raise _unreachable(store, error) from None
    command.stdout.write(f"created {created} lock(s) for {len(names)} declared job(s) in {store!r}")


# -- prune ------------------------------------------------------------------------------------------------


def prune(command: BaseCommand, *, older_than: float | None) -> None:
    """Delete the run history older than the retention (or ``older_than`` days)."""
    retention = get_settings().history_retention if older_than is None else timedelta(days=older_than)
    if retention is None:
        command.stdout.write("MUTEXCRON['HISTORY_RETENTION'] is None (history is kept forever): nothing pruned; "
                             "use --older-than DAYS to prune anyway")
        return
    cutoff = django_timezone.now() - retention
    try:
        deleted = history.prune(cutoff).deleted  # in batches: never holds the table long
    except DatabaseError as error:
        raise CommandError(f"could not prune the run history: {error}") from None
    command.stdout.write(f"deleted {deleted} run(s) that started before {when(cutoff)} (older than {retention})")
