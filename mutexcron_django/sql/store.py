"""Locks in the app's own SQL database through Django's ORM: the embedded default (SQLite works).

Acquire is one conditional UPDATE decided on the database's clock (``DbNow()``), then a rowcount check:
no read-modify-write, so concurrent instances cannot both win. A deleted lock keeps its row with
``deleted`` set (a tombstone hidden from readers); seeding or acquiring revives it, token and last fire kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import Error, IntegrityError, OperationalError, connections, transaction
from django.db.models import BooleanField, Case, ExpressionWrapper, F, Q, QuerySet, When

from mutexcron.errors import StoreUnavailable
from mutexcron.stores.base import (
    AcquireRequest,
    AcquireStatus,
    Acquisition,
    ControlStore,
    LockState,
    LockStore,
    OverlapStore,
    Renewal,
    TakeOverStore,
    check_definition,
    check_incident,
    check_outcome,
    check_pause_note,
)

from ..models import Lock
from .clock import AsUTC, DbNow, aware, db_now, now_minus, now_plus, plus
from .databases import checked_alias, is_retryable, parse_django_url, sql_errors
from .overlap import SLOT_LIVE, claim_next, renew_watching, slot_allows
from .states import lock_states
from .takeover import NOT_PAUSED, PAUSED, free_for, reserve_columns, reserved, take_over

P = ParamSpec("P")
T = TypeVar("T")


class DjangoLockStore(LockStore, ControlStore, OverlapStore, TakeOverStore):
    """The ``Lock`` model as a lock store; ``using`` picks the database alias (default: the router's)."""

    def __init__(self, using: str | None = None) -> None:
        self.using = checked_alias(using, Lock)
        self.database_alias = self.using  # LockStore.database_alias: seeded after migrate, checked with it
        # One transaction per batch where rows can be locked in order (SELECT … FOR UPDATE): not on SQLite,
        # which locks the whole file and has no round trips to save.
        self.batches_acquires = connections[self.using].features.has_select_for_update

    @classmethod
    def from_url(cls, url: str) -> DjangoLockStore:
        """``django://`` or ``django://<database alias>``; anything more, or an unknown alias, is a StoreConfigError."""
        alias, _ = parse_django_url(url, Lock, what="store")
        return cls(alias)

    @property
    def _locks(self) -> QuerySet[Lock]:
        return Lock.objects.using(self.using)

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``operation`` with database errors raised as StoreUnavailable, a connection they broke dropped
        (see :func:`.databases.drop_broken_connection`: the scheduler's threads would keep it for good)."""
        with sql_errors(self.using, f"database {self.using!r}"):
            return operation(*args, **kwargs)

    def seed(self, names: Iterable[str]) -> int:
        def run() -> int:
            wanted = list(dict.fromkeys(names))
            created = self._locks.filter(name__in=wanted, deleted=True).update(deleted=False)  # revived
            existing = set(self._locks.filter(name__in=wanted).values_list("name", flat=True))
            for name in wanted:
                if name not in existing:
                    created += self._create(name)
            return created

        return self._call(run)

    def _create(self, name: str, attempts: int = 3) -> int:
        """Insert ``name``'s row unless another instance does at the same moment: 1 if this call created it. Two
        inserts of one new key can deadlock on MariaDB's gap locks; the loser tries again and finds the row."""
        for attempt in range(attempts):
            try:
                with transaction.atomic(using=self.using):
                    self._locks.create(name=name, created_at=DbNow())
                return 1
            except IntegrityError:  # another instance seeded it a moment ago
                return 0
            except Error as error:
                if attempt + 1 == attempts or not is_retryable(error):
                    raise
        return 0

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        request = AcquireRequest(name, owner, lease, fire_time, schedule_version)

        def run() -> Acquisition:
            for _ in range(2):
                # PostgreSQL, MariaDB/MySQL: a batch of one, whose row lock waits at most BATCH_LOCK_TIMEOUT.
                answer = (acquire_batch(self._locks, self.using, [request]).get(name) if self.batches_acquires
                          else self._update_one(request))
                if answer is not None:
                    return answer
                self.seed([name])  # create it, then try once more
            raise StoreUnavailable(f"database {self.using!r}: lock row for {name!r} vanished while acquiring")

        return self._call(run)

    def _update_one(self, request: AcquireRequest) -> Acquisition | None:
        """One conditional UPDATE decides it all on the database's clock: not paused (or the pause's until passed),
        fired for the current schedule, a new fire, free, and no live overlap slot holding another tick (a deleted
        row it takes is revived; one it refuses stays deleted). None: no row."""
        name, fire_time, schedule_version = request.name, request.fire_time, request.schedule_version
        free = self._locks.filter(Q(name=name) & NOT_PAUSED & free_for(request.lease) & slot_allows(fire_time))
        if fire_time is not None:
            free = free.filter(Q(last_fire_time__isnull=True) | Q(last_fire_time__lt=fire_time))
        if schedule_version is not None:
            free = free.filter(schedule_version=schedule_version)
        with transaction.atomic(using=self.using):
            if free.update(**_taken(request.owner, request.lease, fire_time)) == 1:
                return Acquisition(AcquireStatus.ACQUIRED, token=self._locks.get(name=name).token)
        state = (self._locks.filter(name=name)
                 .values("locked_by", "schedule_version", last_fire=AsUTC("last_fire_time"),
                         paused_now=ExpressionWrapper(PAUSED, output_field=BooleanField()))
                 .first())
        return None if state is None else _refusal(state, fire_time, schedule_version)  # a tombstone's too

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        """The fires of one instant in one transaction (see :func:`acquire_batch`): their rows locked in name
        order, decided on the database's clock, the won ones taken by one UPDATE per owner, lease and fire.
        A manual request, a second request for one name and a missing row go through :meth:`acquire`."""
        if not self.batches_acquires or len(requests) < 2:
            return super().acquire_many(requests)
        firsts: dict[str, int] = {}
        for index, request in enumerate(requests):
            if request.fire_time is not None:
                firsts.setdefault(request.name, index)
        batch = [requests[index] for index in firsts.values()]
        try:
            decided = self._call(acquire_batch, self._locks, self.using, batch)
        except StoreUnavailable as error:  # rolled back: nothing of this batch was taken
            return [error] * len(requests)
        answers: list[Acquisition | StoreUnavailable] = []
        for index, request in enumerate(requests):
            answer = decided.get(request.name) if firsts.get(request.name) == index else None
            answers.append(super().acquire_many([request])[0] if answer is None else answer)
        return answers

    def take_over(self, name: str, *, tick_token: int, owner: str, lease: timedelta,
                  schedule_version: int | None = None) -> Acquisition:
        request = AcquireRequest(name, owner, lease, None, schedule_version)
        return self._call(take_over, self._locks, self.using, request, tick_token)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return self._call(lambda: self._locks.filter(name=name, locked=True, token=token)
                          .update(lock_until=now_plus(lease)) == 1)

    # -- the overlap policies' state (OverlapStore, see .overlap): one conditional UPDATE each ----------------

    def claim_next(self, name: str, *, fire_time: datetime, lease: timedelta, replace: bool = False) -> bool:
        return self._call(claim_next, self._locks, name, fire_time, lease, replace)

    def renew_watching(self, name: str, *, token: int, lease: timedelta) -> Renewal:
        return self._call(renew_watching, self._locks, self.using, name, token, lease)

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        finished: dict[str, Any] = {}  # the outcome, written by the same UPDATE (one database now for all)
        if outcome is not None:
            finished = {"last_outcome": outcome, "last_finished_at": DbNow(), "last_error": error}
            if outcome == "succeeded":
                finished |= {"last_success_at": DbNow(), "failures": 0}

        def run() -> bool:
            mine = self._locks.filter(name=name, locked=True, token=token)
            with transaction.atomic(using=self.using):
                # Still inside hold_at_least: keep it locked until then. Otherwise free it now.
                held = mine.filter(last_locked_at__gt=now_minus(hold_at_least))
                if hold_at_least and held.update(lock_until=plus("last_locked_at", hold_at_least),
                                                 last_released_at=DbNow(), tick_token=0, **finished) == 1:
                    return True
                return mine.update(locked=False, lock_until=DbNow(), last_released_at=DbNow(), tick_token=0,
                                   **finished) == 1

        return self._call(run)

    def force_unlock(self, name: str) -> bool:
        return self._call(lambda: self._locks.filter(name=name, locked=True)
                          .update(locked=False, lock_until=DbNow(), last_released_at=DbNow(), tick_token=0) == 1)

    def delete(self, name: str) -> bool:
        return self._call(lambda: self._locks.filter(name=name, deleted=False).update(deleted=True) == 1)

    def lock(self, name: str) -> LockState | None:
        states = self._call(lambda: lock_states(self._locks.filter(name=name, deleted=False)))
        return states[0] if states else None

    def locks(self) -> list[LockState]:
        return self._call(lambda: lock_states(self._locks.filter(deleted=False).order_by("name")))

    # -- run-time control by operators: one UPDATE on the database's clock each, then the row read back ----

    def _control(self, name: str, rows: Callable[[QuerySet[Lock]], QuerySet[Lock]], **changes: Any) -> LockState | None:
        def run() -> LockState | None:
            rows(self._locks.filter(name=name, deleted=False)).update(**changes)
            states = lock_states(self._locks.filter(name=name, deleted=False))
            return states[0] if states else None

        return self._call(run)

    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None,
              note: str | None = None) -> LockState | None:
        if until is not None and until.tzinfo is None:
            raise ValueError(f"naive datetime {until!r}; pass an aware one")
        return self._control(name, lambda rows: rows, paused=True, paused_at=DbNow(), paused_by=by,
                             paused_until=until.astimezone(UTC) if until is not None else None,
                             pause_note=check_pause_note(note))

    def record_failure(self, name: str, *, pause_after: int | None = None, by: str | None = None,
                       note: str | None = None) -> tuple[int, bool]:
        note = check_pause_note(note)

        def run() -> tuple[int, bool]:
            rows = self._locks.filter(name=name, deleted=False)
            with transaction.atomic(using=self.using):  # the row stays locked from the count to the pause
                if rows.update(failures=F("failures") + 1) != 1:
                    return 0, False
                failures = rows.values_list("failures", flat=True).get()
                paused = pause_after is not None and failures >= pause_after and rows.filter(NOT_PAUSED).update(
                    paused=True, paused_at=DbNow(), paused_until=None, paused_by=by, pause_note=note) == 1
            return failures, paused

        return self._call(run)

    def resume(self, name: str) -> LockState | None:
        # A pause whose until has passed ended then, not now: the ticks after it are missed, not paused.
        # resumed_at first: MySQL's SET sees the columns assigned before it (paused_until would be NULL).
        ended = Case(When(paused_until__lte=DbNow(), then=F("paused_until")), default=DbNow())
        return self._control(name, lambda rows: rows.filter(paused=True), resumed_at=ended, paused=False,
                             paused_at=None, paused_until=None, paused_by=None, pause_note=None)

    def set_schedule(self, name: str, spec: str | None, *, timezone: str | None = None,
                     by: str | None = None) -> LockState | None:
        return self._control(name, lambda rows: rows, schedule=spec, schedule_timezone=timezone, schedule_by=by,
                             schedule_changed_at=DbNow(), schedule_version=F("schedule_version") + 1)

    def define(self, name: str, definition: str | None, *, by: str | None = None) -> LockState | None:
        changes: dict[str, Any] = {"definition": definition, "schedule_version": F("schedule_version") + 1,
                                   "schedule_by": by, "schedule_changed_at": DbNow()}
        if definition is None:  # hidden as delete() hides it, token and last fire time kept
            return self._call(self._define_row, name, self._locks.filter(name=name, deleted=False), deleted=True,
                              **changes)
        changes |= {"definition": check_definition(definition), "schedule": None, "schedule_timezone": None}

        def run() -> LockState:
            rows = self._locks.filter(name=name)  # visible or deleted: the UPDATE revives it
            state = self._define_row(name, rows, deleted=False, **changes)
            if state is None:
                try:
                    with transaction.atomic(using=self.using):  # hidden until the UPDATE below defines it
                        self._locks.create(name=name, created_at=DbNow(), deleted=True)
                except IntegrityError:  # another instance created it a moment ago
                    pass
                state = self._define_row(name, rows, deleted=False, **changes)
            if state is None:
                raise StoreUnavailable(f"database {self.using!r}: lock row for {name!r} vanished while defining it")
            return state

        return self._call(run)

    def _define_row(self, name: str, rows: QuerySet[Lock], **changes: Any) -> LockState | None:
        """One UPDATE of ``rows`` (name's row), then the row read back, deleted or not, in the same transaction; None
        if it matched none. Its transaction ends there: no MariaDB gap lock is held while the row is created."""
        with transaction.atomic(using=self.using):
            if rows.update(**changes) != 1:
                return None
            return lock_states(self._locks.filter(name=name))[0]

    # -- alerts: one conditional UPDATE each, so exactly one caller opens (replaces or closes) an incident ----

    def open_incident(self, name: str, incident: str, *, replacing: str | None = None) -> bool:
        check_incident(incident)
        current: dict[str, object] = (
            {"incident__isnull": True} if replacing is None else {"incident": check_incident(replacing)})
        return self._call(lambda: self._locks.filter(name=name, deleted=False, **current)
                          .update(incident=incident, incident_at=DbNow()) == 1)

    def close_incident(self, name: str, incident: str) -> bool:
        check_incident(incident)
        return self._call(lambda: self._locks.filter(name=name, deleted=False, incident=incident)
                          .update(incident=None, incident_at=None) == 1)

    def now(self) -> datetime:
        return self._call(db_now, self.using)

    def __repr__(self) -> str:
        return f"<DjangoLockStore database={self.using!r}>"


# How long a batch waits for a row another transaction holds before it answers BUSY: a holder stopped between its
# UPDATE and its COMMIT (SIGSTOP, a debugger) must not stop every other instance's fires with it. PostgreSQL's
# lock_timeout; on MariaDB the statement's own innodb_lock_wait_timeout, in whole seconds (1 s). MySQL waits its
# innodb_lock_wait_timeout (50 s by default).
BATCH_LOCK_TIMEOUT = timedelta(milliseconds=500)


def acquire_batch(locks: QuerySet[Lock], using: str, batch: Sequence[AcquireRequest]) -> dict[str, Acquisition]:
    """Each request (one per name) decided from its row, read FOR UPDATE in name order (so
    that two batches never deadlock) on the database's clock; the won rows taken (a deleted one revived), all in one
    transaction. A name without a row is left out: the caller creates it and asks again. A row still locked after
    BATCH_LOCK_TIMEOUT answers BUSY."""
    names = sorted(request.name for request in batch)
    connection = connections[using]
    own_transaction = not connection.in_atomic_block  # SET LOCAL would outlive a savepoint, into the caller's
    try:
        with transaction.atomic(using=using):
            if connection.vendor == "postgresql" and own_transaction:
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{BATCH_LOCK_TIMEOUT // timedelta(milliseconds=1)}ms'")
            wanted = locks.select_for_update().filter(name__in=names).order_by("name").values(
                "name", "token", "locked_by", "deleted", "schedule_version", last_fire=AsUTC("last_fire_time"),
                paused_now=ExpressionWrapper(PAUSED, output_field=BooleanField()),
                free=ExpressionWrapper(Q(locked=False) | Q(lock_until__lte=DbNow()), output_field=BooleanField()),
                slot_fire=AsUTC("next_fire"), slot_live=SLOT_LIVE, **reserve_columns())
            rows = _read_for_update(connection, wanted)
            answers, won = _decide(batch, {row["name"]: row for row in rows})
            for (owner, lease, fire_time), taken in won.items():
                locks.filter(name__in=taken).update(**_taken(owner, lease, fire_time))
    except OperationalError as error:
        if not _lock_wait_timed_out(error):
            raise
        # A row was held past the timeout, by a transaction that will take it or free it: not this instance's.
        return {request.name: Acquisition(AcquireStatus.BUSY) for request in batch}
    return answers


def _read_for_update(connection: Any, rows: QuerySet[Lock, Any]) -> list[dict[str, Any]]:
    """The rows of a ``values()`` query with FOR UPDATE. On MariaDB the statement waits at most BATCH_LOCK_TIMEOUT
    (rounded up to whole seconds) for a row another transaction holds: ``SET STATEMENT innodb_lock_wait_timeout
    FOR`` the query Django compiles, its values converted as Django would, the connection's own setting untouched."""
    if connection.vendor != "mysql" or not connection.mysql_is_mariadb:
        return list(rows)
    compiler = rows.query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    seconds = max(1, math.ceil(BATCH_LOCK_TIMEOUT.total_seconds()))
    with connection.cursor() as cursor:
        cursor.execute(f"SET STATEMENT innodb_lock_wait_timeout={seconds} FOR {sql}", params)
        fetched = cursor.fetchall()
    query = rows.query
    names = [*query.extra_select, *query.values_select, *query.annotation_select]
    return [dict(zip(names, row, strict=True)) for row in compiler.results_iter(results=[fetched])]


def _taken(owner: str, lease: timedelta, fire_time: datetime | None) -> dict[str, Any]:
    """What an acquire writes to the row it takes (a manual run, without a fire time, leaves the last fire); it
    empties the overlap slot."""
    changes = {"locked": True, "locked_by": owner, "last_locked_at": DbNow(), "lock_until": now_plus(lease),
               "tick_token": F("token") + 1, "token": F("token") + 1, "deleted": False, "next_fire": None,
               "next_until": None}  # tick_token first: MySQL's SET sees the columns assigned before it
    if fire_time is not None:
        changes["last_fire_time"] = fire_time
    return changes


def _lock_wait_timed_out(error: OperationalError) -> bool:
    """PostgreSQL's lock_not_available (after ``lock_timeout``) or MySQL's 1205 (``innodb_lock_wait_timeout``)."""
    cause = error.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return sqlstate == "55P03" or bool(getattr(cause, "args", None) and cause.args[0] == 1205)  # type: ignore[union-attr]


def _decide(batch: Sequence[AcquireRequest], states: Mapping[str, Mapping[str, Any]],
            ) -> tuple[dict[str, Acquisition], dict[tuple[str, timedelta, datetime | None], list[str]]]:
    """Each request's answer from its locked row (none for a name without one), and the won names grouped by
    what their UPDATE writes: owner, lease and fire time. Won: a refusal would only have said BUSY, it is free, and
    no live overlap slot holds another tick."""
    answers: dict[str, Acquisition] = {}
    won: dict[tuple[str, timedelta, datetime | None], list[str]] = {}
    for request in batch:
        state = states.get(request.name)
        if state is None:
            continue
        refusal = _refusal(state, request.fire_time, request.schedule_version)
        held = ((bool(state["slot_live"]) and aware(state["slot_fire"]) != request.fire_time)  # the slot, or a retry's
                or reserved(state, request.lease))
        if refusal.status is AcquireStatus.BUSY and state["free"] and not held:
            answers[request.name] = Acquisition(AcquireStatus.ACQUIRED, token=state["token"] + 1)
            won.setdefault((request.owner, request.lease, request.fire_time), []).append(request.name)
        else:  # a deleted row refused stays deleted
            answers[request.name] = refusal
    return answers, won


def _refusal(state: Mapping[str, Any], fire_time: datetime | None, schedule_version: int | None) -> Acquisition:
    """Why the conditional UPDATE took nothing, from the row read after it: in the contract's order."""
    holder = state["locked_by"]
    if state["paused_now"]:
        return Acquisition(AcquireStatus.PAUSED, holder=holder)
    if schedule_version is not None and schedule_version != state["schedule_version"]:
        return Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=state["schedule_version"])
    last_fire = aware(state["last_fire"])
    if fire_time is not None and last_fire is not None and last_fire >= fire_time:
        return Acquisition(AcquireStatus.ALREADY_RAN, holder=holder)
    return Acquisition(AcquireStatus.BUSY, holder=holder)

