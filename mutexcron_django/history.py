"""The run history as it is written: one ``JobRun`` row per scheduled tick, however many instances fire it.

Every instance fires every tick; one runs it and the others are refused (``skipped_already_ran``). Instead of
a row per instance, the tick's row (unique ``tick_key``) holds the run and counts the fires folded into it:
``fired_count`` and ``fired_by`` (each fire's instance and lateness, one a line). The skips usually come
first (the runner writes when its body has finished), so whoever writes a tick first inserts its row, and
the others fold into it with one UPDATE each (``fired_count + 1``, ``fired_by || line``): no read-modify-write,
so concurrent writers in other processes lose nothing, and an insert that loses the race (IntegrityError on
``tick_key``) folds instead. The run's own write upgrades a skipper's placeholder row to the run.

A ``run_on="tasks"`` tick's winner writes ``enqueued`` (with the task id) as the tick's run; the worker's run of
the body, when the worker writes history (``manage.py mutexcron worker`` does), takes that row over (its outcome,
instance, times and error), leaving the fires folded into it as they are.

Manual runs and fires skipped for another reason (busy, store error, stale schedule) keep a row of their own, and
so do the runs of a backfill (``backfill``: an operator's range of ticks, which may include ticks the schedule
ran); a backfill's tick that another backfill of its range ran, or that a pause refused, is no row.
Fires skipped by an operator's pause are no rows: each pause episode is one :class:`PauseSpan`, whose end
later paused fires move. Every statement is its own transaction (a savepoint inside a caller's), so no
writer holds a lock while it waits for another.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, models, router, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat

from mutexcron import Outcome, RunRecord

from .models import JobRun, PauseSpan
from .sql.databases import DELETE_BATCH, Pruned, delete_in_batches

__all__ = ["PRUNE_BATCH", "Pruned", "fire_entry", "fold", "note_pause", "prune", "take_over", "tick_key", "write"]

# A tick's own outcomes (a skipped_late tick was taken: the other fires are refused as already run) and its refusals.
FOLDED = (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.SKIPPED_LATE, Outcome.SKIPPED_ALREADY_RAN,
          Outcome.ENQUEUED)
WORKER_RAN = (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.TIMED_OUT)  # with a task id: a worker's run of its body
PLACEHOLDER = Outcome.SKIPPED_ALREADY_RAN  # a tick row that no run has upgraded (yet)
ATTEMPTS = 3  # update-or-insert rounds before a run is kept apart (its tick's row holds a run already)
PRUNE_BATCH = DELETE_BATCH  # ids per DELETE: each statement locks few rows, briefly


def tick_key(job_name: str, fire_time: datetime) -> str:
    """The key of a scheduled tick's row: ``<job>@<fire time, UTC ISO 8601>``."""
    return f"{job_name}@{fire_time.astimezone(UTC).isoformat()}"


def fire_entry(record: RunRecord) -> str:
    """One fire in ``fired_by``: the instance and how late it fired (start minus the nominal fire time)."""
    late = (record.started_at - record.fire_time).total_seconds()
    return f"{' '.join(record.instance_id.splitlines())} {late:+.3f}s"


def _fields(record: RunRecord) -> dict[str, Any]:
    return {"job_name": record.job_name, "fire_time": record.fire_time, **_run_fields(record)}


def _run_fields(record: RunRecord) -> dict[str, Any]:
    return {"instance_id": record.instance_id, "outcome": str(record.outcome), "started_at": record.started_at,
            "finished_at": record.finished_at, "error": record.error or "", "token": record.token,
            "lock_lost": record.lock_lost, "manual": record.manual, "catch_up": record.catch_up,
            "task_id": record.task_id, "backfill": record.backfill}


def write(record: RunRecord, *, using: str | None = None) -> None:
    """Write ``record`` to the history: folded into its tick's row, a row of its own, or a pause span.
    Database errors are raised (the runtime's listener logs them)."""
    alias = using or router.db_for_write(JobRun)
    if record.backfill and record.outcome in (Outcome.SKIPPED_ALREADY_RAN, Outcome.SKIPPED_PAUSED):
        return
    if record.outcome is Outcome.SKIPPED_PAUSED:
        if not record.manual:
            note_pause(record.job_name, record.fire_time, using=alias)
        return
    if record.task_id is not None and record.outcome in WORKER_RAN:
        take_over(record, using=alias)
        return
    if record.manual or record.backfill or record.outcome not in FOLDED:
        with transaction.atomic(using=alias):
            JobRun.objects.using(alias).create(**_fields(record))
        return
    fold(record, using=alias)


def fold(record: RunRecord, *, using: str) -> JobRun | None:
    """Fold a scheduled run or ``skipped_already_ran`` fire into its tick's row, inserting the row if it is the
    tick's first write. Returns the row it inserted, if any."""
    key = tick_key(record.job_name, record.fire_time)
    entry = fire_entry(record)
    ticks = JobRun.objects.using(using).filter(tick_key=key)
    folded = {"fired_count": F("fired_count") + 1,
              "fired_by": Concat("fired_by", Value("\n" + entry), output_field=models.TextField())}
    ran = record.outcome is not PLACEHOLDER
    for _ in range(ATTEMPTS):
        with transaction.atomic(using=using):
            if ran:  # the run takes a skipper's placeholder over, keeping the fires folded into it
                updated = ticks.filter(outcome=PLACEHOLDER).update(**_run_fields(record), **folded)
            else:
                updated = ticks.update(**folded)
            if not updated and record.task_id is not None:  # its worker's run was written first: count the fire
                updated = ticks.filter(task_id=record.task_id).update(**folded)
        if updated:
            return None
        try:
            with transaction.atomic(using=using):
                return JobRun.objects.using(using).create(tick_key=key, fired_count=1, fired_by=entry,
                                                          **_fields(record))
        except IntegrityError:
            continue  # another writer made the row meanwhile: fold into it
    # Only a run gets here: its tick's row holds a run already (a tick run twice). Keep this one apart.
    with transaction.atomic(using=using):
        return JobRun.objects.using(using).create(**_fields(record))


def take_over(record: RunRecord, *, using: str) -> None:
    """A worker's run of an enqueued body: it takes over the row of its task (``enqueued``), or the tick's placeholder,
    or makes the tick's row (no fire folded in yet: the winner's ``enqueued`` fire folds into it when it comes)."""
    rows = JobRun.objects.using(using)
    fields = _run_fields(record)
    key = None if record.manual else tick_key(record.job_name, record.fire_time)
    for _ in range(ATTEMPTS):
        with transaction.atomic(using=using):
            updated = rows.filter(task_id=record.task_id, outcome=Outcome.ENQUEUED).update(**fields)
            if not updated and key is not None:
                updated = rows.filter(tick_key=key, outcome=PLACEHOLDER).update(**fields)
        if updated:
            return
        try:
            with transaction.atomic(using=using):
                rows.create(tick_key=key, fired_count=0, fired_by="", **_fields(record))
            return
        except IntegrityError:
            continue  # the tick's row was made meanwhile: take it over
    with transaction.atomic(using=using):
        rows.create(**_fields(record))


def note_pause(job_name: str, tick: datetime, *, using: str | None = None) -> None:
    """A fire of ``tick`` was skipped by a pause: extend the job's latest pause span to it (an UPDATE, by the
    first instance to get there), or begin a span if a tick ran since that span ended (or there is none)."""
    alias = using or router.db_for_write(PauseSpan)
    spans = PauseSpan.objects.using(alias).filter(job_name=job_name)
    with transaction.atomic(using=alias):
        latest = spans.filter(started_at__lte=tick).order_by("-started_at").first()
        if latest is not None and (latest.ended_at >= tick or not _ran_between(job_name, latest.ended_at, tick,
                                                                               alias)):
            spans.filter(pk=latest.pk, ended_at__lt=tick).update(ended_at=tick)
            return
    try:
        with transaction.atomic(using=alias):
            PauseSpan.objects.using(alias).create(job_name=job_name, started_at=tick, ended_at=tick)
    except IntegrityError:
        pass  # another instance began this span at the same tick


def _ran_between(job_name: str, after: datetime, before: datetime, using: str) -> bool:
    """True if a scheduled fire of a tick strictly between ``after`` and ``before`` was written (not paused)."""
    rows = JobRun.objects.using(using).filter(job_name=job_name, manual=False, backfill=False, fire_time__gt=after,
                                              fire_time__lt=before)
    return rows.exists()


def prune(cutoff: datetime, *, using: str | None = None, batch: int = PRUNE_BATCH,
          budget: float | None = None) -> Pruned:
    """Delete the history that started before ``cutoff`` (and pause spans that ended before it), ``batch``
    ids per DELETE, each its own transaction, so no statement holds the table long. With ``budget``
    (seconds), stop after the batch that exceeds it; the next prune goes on."""
    old = JobRun.objects.using(using or router.db_for_write(JobRun)).filter(started_at__lt=cutoff)
    pruned = delete_in_batches(old, batch=batch, budget=budget, own_transactions=True)
    if pruned.complete:
        span_alias = using or router.db_for_write(PauseSpan)
        with transaction.atomic(using=span_alias):
            PauseSpan.objects.using(span_alias).filter(ended_at__lt=cutoff).delete()
    return pruned
