"""Task records of the RabbitMQ task backend in the app's SQL database: ``cancel_store="django://[alias]"``.

:class:`DjangoTaskRecords`, the ``TaskRecordStore`` contract on the ``TaskMark``
model: each change one compare-and-set on one row, expired rows counted as absent and pruned. How it locks and
expires rows is described in ``docs/sql-tasks.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict, TypeVar

from django.db import DatabaseError, DataError, IntegrityError, OperationalError, connections, transaction
from django.db.models import Count, ExpressionWrapper, F, Q, QuerySet
from django.db.models.expressions import CombinedExpression

from mutexcron.backend_helpers import clip_error
from mutexcron.errors import StoreUnavailable
from mutexcron.tasks.model import NewTask, TaskStatus, stored_status
from mutexcron.tasks.records.base import (
    DEFAULT_RETENTION,
    Claim,
    RecordDataError,
    TaskRecord,
    TaskRecordStore,
    Verdict,
    check_retention,
    decide_claim,
    retention_option,
)

from ...models import TaskMark
from ..clock import AsUTC, DbNow, aware, now_plus
from ..databases import NowAndThen, checked_alias, delete_in_batches, parse_django_url, sql_errors

__all__ = ["DjangoTaskRecords"]

PRUNE_EVERY = 600.0  # seconds between two deletions of expired rows by one store
FINISHED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)
# MariaDB's errors about a value, not the server: a character the column's charset lacks, compared (1267, illegal
# mix of collations) or stored (1366, incorrect string value). Its driver raises them as OperationalError; a
# value too long for its column (1406), and PostgreSQL's NUL byte, are a DataError already.
MYSQL_BAD_VALUE = frozenset({1267, 1366})

T = TypeVar("T")


def _live() -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=DbNow())


class DjangoTaskRecords(TaskRecordStore):
    """Task records as ``TaskMark`` rows; ``using`` is the database alias (default: the router's)."""

    def __init__(self, using: str | None = None, *, retention: timedelta = DEFAULT_RETENTION) -> None:
        self.using = checked_alias(using, TaskMark)
        self.retention = check_retention(retention)
        self._prunes = NowAndThen(PRUNE_EVERY)

    @classmethod
    def from_url(cls, url: str) -> DjangoTaskRecords:
        """``django://`` or ``django://<alias>``, with ``?retention=<seconds>`` (default 7 days)."""
        alias, options = parse_django_url(url, TaskMark, what="cancel store", options=("retention",))
        return cls(alias, retention=retention_option(url, options))

    @property
    def _marks(self) -> QuerySet[TaskMark]:
        return TaskMark.objects.using(self.using)

    def _call(self, operation: Callable[[], T], task_ids: Sequence[str]) -> T:
        """``operation``, a database error raised as StoreUnavailable, but one about the data it was given (a task
        id the database cannot keep) as RecordDataError naming ``task_ids``: bad data is no outage, and a
        consumer that took it for one would put the message back in the queue for good."""
        where = f"task cancel store django://{self.using}"
        with sql_errors(self.using, where):
            try:
                return operation()
            except DatabaseError as error:
                if not self._bad_value(error):
                    raise
                named = ", ".join(repr(task_id) for task_id in task_ids[:3]) or "(none)"
                more = f" and {len(task_ids) - 3} more" if len(task_ids) > 3 else ""
                raise RecordDataError(f"{where} cannot keep the data of task {named}{more}: "
                                      f"{type(error).__name__}: {error}") from error

    def _bad_value(self, error: DatabaseError) -> bool:
        """Whether ``error`` is about a value the database was given (:data:`MYSQL_BAD_VALUE`), not about it."""
        if isinstance(error, DataError):
            return True
        code = error.args[0] if error.args else None
        return (isinstance(error, OperationalError) and connections[self.using].vendor == "mysql"
                and code in MYSQL_BAD_VALUE)

    def _expiry(self) -> ExpressionWrapper[CombinedExpression]:
        """The database's now plus the retention: one clock for writing and comparing ``expires_at``."""
        return now_plus(self.retention)

    # -- the interface ------------------------------------------------------------------------------

    def create(self, tasks: Sequence[NewTask]) -> set[str]:
        """One INSERT of every row; if an id is taken (a caller's id scheduled again, or an expired row), the
        expired rows of these ids are deleted and each row is inserted in its own savepoint, a live one kept."""
        if not tasks:
            return set()
        ids = [task.id for task in tasks]

        def row(task: NewTask) -> TaskMark:
            return TaskMark(id=task.id, task_type=task.task_type, payload=task.payload, run_at=task.run_at,
                            status=TaskStatus.SCHEDULED.value, attempts=0, gen=1, error=None,
                            trace_context=task.trace_context, expires_at=None, updated_at=DbNow())

        def run() -> set[str]:
            try:
                with transaction.atomic(using=self.using):
                    self._marks.bulk_create([row(task) for task in tasks], batch_size=500)
                return set(ids)
            except IntegrityError:
                pass
            self._marks.filter(pk__in=ids).exclude(_live()).delete()
            created: set[str] = set()
            for task in tasks:
                try:
                    with transaction.atomic(using=self.using):
                        self._marks.bulk_create([row(task)])
                    created.add(task.id)
                except IntegrityError:
                    continue  # a live record of this id: kept
            return created

        created = self._call(run, ids)
        self._maybe_prune()
        return created

    def discard(self, task_ids: Sequence[str]) -> None:
        if task_ids:
            self._call(lambda: self._marks.filter(pk__in=list(task_ids)).delete(), task_ids)

    def store_result(self, task_id: str, text: str) -> bool:
        """Keep ``text`` (a django.tasks result) on the task's record; False if the record is gone."""
        return self._call(lambda: self._marks.filter(_live(), pk=task_id).update(result=text) == 1, [task_id])

    def load_result(self, task_id: str) -> str | None:
        return self._call(lambda: self._marks.filter(_live(), pk=task_id).values_list("result", flat=True).first(),
                          [task_id])

    def pending_counts(self) -> Mapping[str, int]:
        """One GROUP BY over the scheduled records (index status, task_type); they never expire."""
        return self._call(lambda: {row["task_type"]: row["n"] for row in
                                   self._marks.filter(status=TaskStatus.SCHEDULED.value)
                                   .values("task_type").annotate(n=Count("pk")).order_by()}, [])

    @property
    def pending_source(self) -> str:
        return f"django://{self.using} task marks"

    def get(self, task_id: str) -> TaskRecord | None:
        row = self._call(lambda: self._marks.filter(_live(), pk=task_id).annotate(utc_run_at=AsUTC("run_at")).first(),
                         [task_id])
        return _record(row) if row is not None else None

    def cancel(self, task_id: str) -> bool:
        return self._call(lambda: self._marks.filter(_live(), pk=task_id, status=TaskStatus.SCHEDULED.value)
                          .update(status=TaskStatus.CANCELLED.value, updated_at=DbNow()) == 1, [task_id])

    def claim(self, task_id: str, *, gen: int, attempt: int, redelivered: bool) -> Claim:
        def run() -> Claim:
            with transaction.atomic(using=self.using):
                # Lock the row first (a write): the decision below is made on a row nobody else can change.
                self._marks.filter(pk=task_id).update(gen=F("gen"))
                row = self._marks.filter(_live(), pk=task_id).first()
                if row is None:
                    return Claim(Verdict.MISSING, 0)
                claim = decide_claim(stored_status(row.status), row.gen, row.attempts, gen=gen, attempt=attempt,
                                     redelivered=redelivered)
                if claim.verdict is Verdict.RUN:
                    self._marks.filter(pk=task_id).update(status=TaskStatus.RUNNING.value, gen=gen,
                                                          attempts=claim.attempts, expires_at=self._expiry(),
                                                          updated_at=DbNow())
                elif claim.verdict is Verdict.CANCELLED:  # its message came: keep the mark for the retention only
                    self._marks.filter(pk=task_id).update(expires_at=self._expiry())
                return claim

        return self._call(run, [task_id])

    def finish(self, task_id: str, *, gen: int, status: TaskStatus, error: str | None = None) -> bool:
        if status not in FINISHED:
            raise ValueError(f"finish() takes succeeded, failed or cancelled, not {status!r}")
        expires = None if status == TaskStatus.FAILED else self._expiry()
        return self._call(lambda: self._marks.filter(_live(), pk=task_id, status=TaskStatus.RUNNING.value, gen=gen)
                          .update(status=status.value, error=clip_error(error) or None, expires_at=expires,
                                  updated_at=DbNow()) == 1, [task_id])

    def reschedule(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime, error: str) -> bool:
        return self._call(lambda: self._marks.filter(_live(), pk=task_id, status=TaskStatus.RUNNING.value, gen=gen)
                          .update(status=TaskStatus.SCHEDULED.value, gen=new_gen, run_at=run_at,
                                  error=clip_error(error) or None, expires_at=None, updated_at=DbNow()) == 1,
                          [task_id])

    def reopen(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime) -> bool:
        def run() -> bool:
            live = self._marks.filter(_live(), pk=task_id)
            if live.filter(status=TaskStatus.FAILED.value, gen=gen).update(
                status=TaskStatus.SCHEDULED.value, gen=new_gen, run_at=run_at, attempts=0,
                expires_at=None, updated_at=DbNow(),
            ) == 1:
                return True
            # The re-published message overtook this call (and claimed the record): done already.
            return live.exclude(status=TaskStatus.CANCELLED.value).filter(gen__gte=new_gen).exists()

        return self._call(run, [task_id])

    def prune(self) -> int:
        """Delete expired rows; returns how many."""
        return self._call(lambda: delete_in_batches(self._marks.filter(expires_at__lte=DbNow())).deleted, [])

    def _maybe_prune(self) -> None:
        if not self._prunes.due():
            return
        with contextlib.suppress(StoreUnavailable):  # the next create tries again later; nothing depends on it
            self.prune()

    def __repr__(self) -> str:
        return f"<DjangoTaskRecords database={self.using!r}>"



if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    class _RunAtUTC(TypedDict):
        utc_run_at: datetime


def _record(row: WithAnnotations[TaskMark, _RunAtUTC]) -> TaskRecord:
    """The row (read with its ``run_at`` as ``utc_run_at``, see :class:`AsUTC`) as a record."""
    run_at = aware(row.utc_run_at)
    assert run_at is not None
    return TaskRecord(
        id=row.id, task_type=row.task_type, payload=row.payload, run_at=run_at,
        status=stored_status(row.status), attempts=row.attempts, gen=row.gen, error=row.error or None,
        trace_context=row.trace_context or None,
    )
