"""The SQL of the ``django://`` task backend's claims: claim due rows, read the next due time, and the
updates a delivery settles with, each under its claim's token (see ``docs/sql-tasks.md``).

Claims lock rows with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MySQL/MariaDB, and use one conditional
``UPDATE`` on SQLite (one writer at a time); every time is the database's clock.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

from django.db import Error, connections, transaction
from django.db.models import Case, CharField, DateTimeField, F, QuerySet, Value, When
from django.db.models.functions import Cast, Coalesce, Concat

from mutexcron.backend_helpers import epoch_ms

from ...models import ScheduledTask
from ..clock import AsUTC, DbNow, aware, now_plus, now_sql, utc_sql
from ..databases import is_retryable, sql_errors
from .wakeups import Message, wake_payload

logger = logging.getLogger("mutexcron.tasks.django")

REQUEUE_LIMIT = 100  # expired claims put back per claim call
DEADLOCK_RETRIES = 3

Status = ScheduledTask.Status
P = ParamSpec("P")
T = TypeVar("T")
# id, task_type, payload, attempt (this claim's), due (aware UTC: when this attempt became due), trace context
ClaimedRow = tuple[str, str, str, int, datetime | None, str | None]


class HeldClaim(Protocol):
    """What the settling updates read of a delivery (``consumer.DjangoDelivery``): its row, its claim's token, its
    type and its visibility timeout. Declared here so that this module needs nothing of the consumer's."""

    @property
    def id(self) -> str: ...

    @property
    def token(self) -> str: ...

    @property
    def task_type(self) -> str: ...

    @property
    def visibility(self) -> timedelta: ...


Held = TypeVar("Held", bound=HeldClaim)


class TaskClaims:
    """The ``ScheduledTask`` rows of one database alias as workers claim and settle them.

    ``notify`` and ``post`` send wake-ups to other processes and to this one (see :mod:`.wakeups`);
    ``cross_process_wake`` says whether anyone elsewhere hears a claim's visibility deadline.
    """

    def __init__(self, using: str, *, notify: Callable[[list[str]], None], post: Callable[[list[Message]], None],
                 cross_process_wake: bool) -> None:
        self.using = using
        self.vendor = connections[using].vendor
        self.notify = notify
        self.post = post
        self.cross_process_wake = cross_process_wake

    @property
    def tasks(self) -> QuerySet[ScheduledTask]:
        return ScheduledTask.objects.using(self.using)

    def run(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``operation`` with deadlocks and lock timeouts tried again (twice, outside a transaction) and
        database errors raised as StoreUnavailable."""
        with sql_errors(self.using, f"task backend django://{self.using}"):
            for attempt in range(DEADLOCK_RETRIES):
                try:
                    return operation(*args, **kwargs)
                except Error as error:
                    if attempt + 1 < DEADLOCK_RETRIES and is_retryable(error) \
                            and not connections[self.using].in_atomic_block:
                        time.sleep(0.01 * (attempt + 1))
                        continue
                    raise
        raise AssertionError("unreachable")

    def wake(self, due_ms: int, task_types: list[str]) -> None:
        """Tell every worker of ``task_types`` that they are due at ``due_ms``, once the transaction commits."""
        self.notify([wake_payload(due_ms, task_type) for task_type in task_types])
        self.post([(due_ms, task_type) for task_type in task_types])

    def requeue_expired(self) -> None:
        """Running tasks whose claim expired (worker dead or hung) are scheduled again, due now."""
        expired = list(self.tasks.filter(status=Status.RUNNING, visible_until__lte=DbNow())
                       .values_list("pk", "task_type")[:REQUEUE_LIMIT])
        if not expired:
            return
        why = Concat(
            Value("visibility timeout: worker "), Coalesce(F("claimed_by"), Value("?")),
            Value(" did not finish attempt "), Cast(F("attempts"), output_field=CharField()),
            output_field=CharField(),
        )
        with transaction.atomic(using=self.using):
            changed = self.tasks.filter(
                pk__in=[pk for pk, _ in expired], status=Status.RUNNING, visible_until__lte=DbNow()
            ).update(status=Status.SCHEDULED, due=DbNow(), claim_token=None, visible_until=None, error=why,
                     updated_at=DbNow())
            if changed:
                types = sorted({task_type for _, task_type in expired})
                logger.warning("%d task(s) of %s went back to scheduled: their claim expired", changed,
                               ", ".join(types))
                self.wake(0, types)

    def claim(self, types: list[str], limit: int, owner: str,
              visibility: dict[str, timedelta]) -> tuple[str, list[ClaimedRow]]:
        """Claim up to ``limit`` due tasks of ``types`` for ``owner``: the claim's token, and its rows."""
        self.requeue_expired()
        token = uuid.uuid4().hex
        if len(set(visibility.values())) == 1:
            until: Any = now_plus(next(iter(visibility.values())))
        else:
            until = Case(*(When(task_type=t, then=now_plus(v)) for t, v in visibility.items()),
                         default=now_plus(max(visibility.values())), output_field=DateTimeField())
        changes = {
            "status": Status.RUNNING, "attempts": F("attempts") + 1, "claims": F("claims") + 1,
            "claim_token": token, "claimed_by": owner, "visible_until": until, "started_at": DbNow(),
            "updated_at": DbNow(),
        }
        due = self.tasks.filter(status=Status.SCHEDULED, due__lte=DbNow())
        fields = ("pk", "task_type", "payload", "attempts", "trace_context")
        if self.vendor == "sqlite":
            # One writer at a time: the conditional UPDATE picks and marks the rows in one statement.
            chosen = due.filter(task_type__in=types).order_by("due", "pk").values("pk")[:limit]
            if self.tasks.filter(pk__in=chosen, status=Status.SCHEDULED).update(**changes) == 0:
                return token, []
            if self.cross_process_wake:  # sleeping workers learn when these claims expire (if this worker dies)
                # SQLite's clock is this machine's: the deadline is near enough without reading it back.
                shortest = min(visibility[t] for t in types)
                self.notify([wake_payload(epoch_ms(datetime.now(UTC) + shortest), "*")])
            rows = list(self.tasks.filter(status=Status.RUNNING, task_type__in=types, claim_token=token)
                        .annotate(utc_due=AsUTC("due")).order_by("due", "pk").values_list("utc_due", *fields))
            return token, [(pk, task_type, payload, attempts, aware(utc_due), trace)
                           for utc_due, pk, task_type, payload, attempts, trace in rows]
        with transaction.atomic(using=self.using):
            picked: list[tuple[Any, ...]] = []
            # One query per type: the index (status, task_type, due) gives each one's order, so each stops
            # after ``limit`` rows (one query with IN would sort every due row, and MySQL would lock them all).
            for task_type in types:
                picked += list(due.filter(task_type=task_type).select_for_update(skip_locked=True)
                               .annotate(utc_due=AsUTC("due"), db_now=AsUTC(DbNow())).order_by("due", "pk")
                               .values_list("utc_due", *fields, "db_now")[:limit])
            picked = sorted(picked, key=lambda row: (row[0], row[1]))[:limit]  # the rest is unlocked at commit
            if not picked:
                return token, []
            self.tasks.filter(pk__in=[row[1] for row in picked]).update(**changes)
            if self.cross_process_wake:  # sleeping workers learn when these claims expire (if this worker dies)
                shortest = min(visibility[row[2]] for row in picked)
                db_now = aware(picked[0][-1])
                assert db_now is not None
                self.notify([wake_payload(epoch_ms(db_now + shortest), "*")])
        return token, [(pk, task_type, payload, attempts + 1, aware(utc_due), trace)
                       for utc_due, pk, task_type, payload, attempts, trace, _ in picked]

    def next_due(self, types: list[str]) -> tuple[int, int | None]:
        """The database's now, and the earliest due time of ``types`` or visibility deadline of their
        running tasks (None: nothing), in ms: one query."""
        connection = connections[self.using]
        qn = connection.ops.quote_name
        table = qn(ScheduledTask._meta.db_table)
        status, task_type, due, until = (qn(c) for c in ("status", "task_type", "due", "visible_until"))
        columns = [now_sql(self.vendor)]
        params: list[Any] = []
        for one in types:
            earliest = f"(SELECT MIN({due}) FROM {table} WHERE {status} = %s AND {task_type} = %s)"
            columns.append(utc_sql(self.vendor, earliest))
            params += [Status.SCHEDULED.value, one]
        marks = ", ".join(["%s"] * len(types))
        soonest = f"(SELECT MIN({until}) FROM {table} WHERE {status} = %s AND {task_type} IN ({marks}))"
        columns.append(utc_sql(self.vendor, soonest))
        params += [Status.RUNNING.value, *types]
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(columns), params)
            row = cursor.fetchone()
        now = aware(row[0])
        assert now is not None
        times = [epoch_ms(t) for t in (aware(value) for value in row[1:]) if t is not None]
        return epoch_ms(now), (min(times) if times else None)

    def settle(self, delivery: HeldClaim, wake: tuple[int, str] | None = None, **changes: Any) -> bool:
        """Apply ``changes`` to the delivery's row if its claim still holds it (then post ``wake``)."""
        mine = self.tasks.filter(pk=delivery.id, status=Status.RUNNING, claim_token=delivery.token)
        if mine.update(updated_at=DbNow(), visible_until=None, **changes) != 1:
            return False
        if wake is not None:
            self.post([wake])
        return True

    def release(self, delivery: HeldClaim) -> bool:
        """Schedule the delivery's task again, due now, its attempt not counted, if its claim still holds it."""
        with transaction.atomic(using=self.using):
            mine = self.tasks.filter(pk=delivery.id, status=Status.RUNNING, claim_token=delivery.token)
            changed = mine.update(status=Status.SCHEDULED, attempts=F("attempts") - 1, claim_token=None,
                                  visible_until=None, updated_at=DbNow())
            if changed:
                self.wake(0, [delivery.task_type])
            return changed == 1

    def extend(self, deliveries: list[Held]) -> set[Held]:
        """Extend the claims of ``deliveries`` to now + their visibility timeout; the ones still held."""
        kept: set[Held] = set()
        groups: dict[tuple[str, timedelta], list[Held]] = {}
        for delivery in deliveries:
            groups.setdefault((delivery.token, delivery.visibility), []).append(delivery)
        for (token, visibility), group in groups.items():
            ids = [d.id for d in group]
            mine = self.tasks.filter(pk__in=ids, status=Status.RUNNING, claim_token=token)
            if mine.update(visible_until=now_plus(visibility)) == len(ids):
                kept.update(group)
            else:
                held = set(mine.values_list("pk", flat=True))
                kept.update(d for d in group if d.id in held)
        return kept
