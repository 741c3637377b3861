"""Delayed tasks in the app's own SQL database: ``TaskQueue("django://[alias][?max_sleep=…&retention=…]")``.

One ``ScheduledTask`` row per task; workers claim due rows under a token of their claim (no two get the
same task) and sleep until the next due time, woken early by NOTIFY (PostgreSQL), local sockets (SQLite,
MySQL/MariaDB) or this process's producers. This module is the backend; the claim queries, the consumer
and the wake-ups are in ``claims``, ``consumer`` and ``wakeups``. The design, and its
limits, are in ``docs/sql-tasks.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import ParamSpec, TypeVar

from django.db import connections, transaction
from django.db.models import Count, QuerySet

from mutexcron.backend_helpers import epoch_ms, positive_duration
from mutexcron.errors import StoreConfigError
from mutexcron.tasks.backends.base import ClaimingBackend, ConsumeRequest
from mutexcron.tasks.model import NewTask, TaskInfo, decode_trace_context, stored_payload, stored_status
from mutexcron.urls import mask_url, seconds_option

from ...models import ScheduledTask
from ..clock import AsUTC, DbNow, aware, now_minus
from ..databases import checked_alias, delete_in_batches, parse_django_url
from .claims import TaskClaims
from .consumer import DjangoConsumer, DjangoDelivery
from .wakeups import SOCKETS, Message, WakeModes, notify, post, wake_directory, wake_payload

__all__ = ["DbNow", "DjangoDelivery", "DjangoTaskBackend"]

_wake_directory = wake_directory  # its name here before the split (tests use it)

DEFAULT_MAX_SLEEP = 1.0  # seconds; MySQL/MariaDB: producers on other machines cannot wake workers
DEFAULT_MAX_SLEEP_NOTIFIED = 60.0  # seconds; PostgreSQL (NOTIFY), SQLite (sockets): this covers lost wake-ups
DEFAULT_RETENTION = timedelta(days=7)
ENQUEUE_CHUNK = 500

Status = ScheduledTask.Status
P = ParamSpec("P")
T = TypeVar("T")


class DjangoTaskBackend(ClaimingBackend):
    """The ``ScheduledTask`` model as a task backend (see the module docstring for the protocol).

    ``using``: the database alias (default: the router's for ScheduledTask). ``max_sleep``: the longest
    a waiting worker sleeps without looking (default 1 s on MySQL/MariaDB; 60 s on PostgreSQL and SQLite,
    whose workers every producer wakes). ``retention``: how long succeeded and cancelled tasks are kept
    (default 7 days).
    """

    manages_connections = True  # its consumer closes stale connections around each claim (consumer)

    def __init__(
        self,
        using: str | None = None,
        *,
        max_sleep: timedelta | float | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
    ) -> None:
        super().__init__()
        self.using = checked_alias(using, ScheduledTask)
        self.database_alias = self.using  # TaskBackend.database_alias: the admin shows this alias's tasks table
        self.vendor = connections[self.using].vendor
        modes = WakeModes(self.using)
        self.notifies, self.listens = modes.notifies, modes.listens  # producers NOTIFY; workers LISTEN
        self.cross_process_wake = modes.cross_process_wake  # how other processes' workers hear of changes
        self.heard_by = modes.heard_by  # how this process's workers hear of other processes' changes
        if max_sleep is None:
            # On SQLite every producer is on this machine, so every producer can wake the workers.
            woken = self.listens or (self.vendor == "sqlite" and self.cross_process_wake == SOCKETS)
            max_sleep = DEFAULT_MAX_SLEEP_NOTIFIED if woken else DEFAULT_MAX_SLEEP
        self.max_sleep = _positive(max_sleep, "max_sleep").total_seconds()
        self.retention = _positive(retention, "retention")
        # The SQL a consumer and its deliveries run; their wake-ups go through _notify and _post.
        self.claims = TaskClaims(self.using, notify=self._notify, post=self._post,
                                 cross_process_wake=bool(self.cross_process_wake))

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | None = None) -> DjangoTaskBackend:
        """``django://`` (the router's database), ``django://<alias>``; options ``?max_sleep=<seconds>``
        and ``?retention=<seconds>``. Connects to nothing."""
        if cancel_store is not None:
            raise StoreConfigError(
                "the Django task backend cancels atomically in its own table: it takes no cancel_store "
                f"(given {mask_url(str(cancel_store))!r})"
            )
        alias, options = parse_django_url(url, ScheduledTask, what="task backend", options=("max_sleep", "retention"))
        seconds = {name: seconds_option(url, name, value, what="task backend") for name, value in options.items()}
        return cls(alias, **seconds)

    @property
    def _tasks(self) -> QuerySet[ScheduledTask]:
        return ScheduledTask.objects.using(self.using)

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``operation`` with database errors raised as StoreUnavailable (deadlocks tried again first)."""
        return self.claims.run(operation, *args, **kwargs)

    def _notify(self, messages: list[str]) -> None:
        """Wake other processes' workers once the current transaction commits (NOTIFY or datagrams)."""
        notify(self.using, self.cross_process_wake, messages)

    def _post(self, messages: list[Message]) -> None:
        """Wake this process's workers of this database once the current transaction (if any) commits."""
        post(self.using, messages)

    # -- producing --------------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        if not tasks:
            return
        earliest: dict[str, int] = {}
        for task in tasks:
            due = epoch_ms(task.run_at)
            earliest[task.task_type] = min(due, earliest.get(task.task_type, due))

        def run() -> None:
            with transaction.atomic(using=self.using):
                for start in range(0, len(tasks), ENQUEUE_CHUNK):
                    rows = [
                        ScheduledTask(
                            id=task.id, task_type=task.task_type, payload=task.payload, run_at=task.run_at,
                            due=task.run_at, status=Status.SCHEDULED, trace_context=task.trace_context,
                            created_at=DbNow(), updated_at=DbNow(),
                        )
                        for task in tasks[start : start + ENQUEUE_CHUNK]
                    ]
                    self._tasks.bulk_create(rows, ignore_conflicts=True)  # an existing id is left as it is
                self._notify([wake_payload(due, task_type) for task_type, due in earliest.items()])
                self._post([(due, task_type) for task_type, due in earliest.items()])

        self._call(run)

    def cancel(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False
        return self._call(lambda: self._tasks.filter(pk=task_id, status=Status.SCHEDULED).update(
            status=Status.CANCELLED, finished_at=DbNow(), updated_at=DbNow(), visible_until=None) == 1)

    def info(self, task_id: str) -> TaskInfo | None:
        if not isinstance(task_id, str) or not task_id:
            return None
        row = self._call(lambda: self._tasks.filter(pk=task_id).annotate(utc_run_at=AsUTC("run_at")).first())
        return _info(row) if row is not None else None

    def pending_counts(self) -> Mapping[str, int]:
        """One GROUP BY over the scheduled rows (the claim index's status, task_type prefix)."""
        return self._call(lambda: {row["task_type"]: row["n"] for row in self._tasks.filter(status=Status.SCHEDULED)
                                   .values("task_type").annotate(n=Count("pk")).order_by()})

    @property
    def pending_source(self) -> str:
        return f"django://{self.using}"

    def store_result(self, task_id: str, text: str) -> bool:
        """Keep ``text`` (a django.tasks result) on the task's row; False if the task is unknown."""
        return self._call(lambda: self._tasks.filter(pk=task_id).update(result=text) == 1)

    def load_result(self, task_id: str) -> str | None:
        return self._call(lambda: self._tasks.filter(pk=task_id).values_list("result", flat=True).first())

    def retry(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False

        def run() -> bool:
            with transaction.atomic(using=self.using):
                changed = self._tasks.filter(pk=task_id, status=Status.FAILED).update(
                    status=Status.SCHEDULED, attempts=0, due=DbNow(), finished_at=None, claim_token=None,
                    visible_until=None, updated_at=DbNow(),
                )
                if changed != 1:
                    return False
                task_type = self._tasks.filter(pk=task_id).values_list("task_type", flat=True).first() or "*"
                self.claims.wake(0, [task_type])
                return True

        return self._call(run)

    def failed(self, limit: int = 100) -> list[str]:
        """Ids of failed tasks, most recent first."""
        return self._call(lambda: list(self._tasks.filter(status=Status.FAILED).order_by("-finished_at")
                                       .values_list("pk", flat=True)[: max(0, limit)]))

    def prune(self, older_than: timedelta | None = None) -> int:
        """Delete succeeded and cancelled tasks that finished longer than ``older_than`` (default: the
        retention) ago; failed ones are kept until retried. Returns how many were deleted."""
        cutoff = now_minus(older_than if older_than is not None else self.retention)
        old = self._tasks.filter(status__in=[Status.SUCCEEDED, Status.CANCELLED], finished_at__lt=cutoff)
        return self._call(lambda: delete_in_batches(old).deleted)

    # -- consuming --------------------------------------------------------------------------------

    def consumer(self, request: ConsumeRequest) -> DjangoConsumer:
        return DjangoConsumer(self, request)

    def close(self) -> None:
        """Nothing to release: Django owns the connections (each worker closes its own when it stops)."""

    def __repr__(self) -> str:
        return f"<DjangoTaskBackend database={self.using!r} max_sleep={self.max_sleep}s>"

    # -- the claim protocol: what its consumer calls (one claim, one read: the tests count them) ----------

    def claim_batch(self, types: list[str], limit: int, owner: str,
                    visibility: dict[str, timedelta]) -> list[DjangoDelivery]:
        """Claim up to ``limit`` due tasks of ``types`` for ``owner``, each invisible to other workers for its
        type's ``visibility``; the deliveries settle their rows themselves."""
        token, rows = self.claims.claim(types, limit, owner, visibility)
        return [DjangoDelivery(self.claims, pk, task_type, payload, attempt, token, visibility[task_type], due=due,
                               trace_context=decode_trace_context(trace))
                for pk, task_type, payload, attempt, due, trace in rows]

    def next_due(self, types: list[str]) -> tuple[int, int | None]:
        """The database's now, and the earliest due time of ``types`` or visibility deadline of their
        running tasks (None: nothing), in ms."""
        return self.claims.next_due(types)


def _positive(value: timedelta | float, name: str) -> timedelta:
    return positive_duration(value, what=f"Django task backend: {name}", error=StoreConfigError)


def _info(row: ScheduledTask) -> TaskInfo:
    run_at = aware(row.utc_run_at)  # type: ignore[attr-defined]  # annotated by info()
    assert run_at is not None
    return TaskInfo(
        id=row.id, task_type=row.task_type, payload=stored_payload(row.payload), run_at=run_at,
        status=stored_status(row.status),
        attempts=row.attempts, error=row.error or None,
    )
