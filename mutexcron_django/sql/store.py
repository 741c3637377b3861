"""Locks in the app's own SQL database through Django's ORM: the embedded default (SQLite works).

Acquire is one conditional UPDATE decided on the database's clock (``DbNow()``), then a rowcount check (on
PostgreSQL and MariaDB/MySQL: the rows of a batch read FOR UPDATE, then one UPDATE per owner, lease and fire):
no read-modify-write, so concurrent instances cannot both win. A deleted lock keeps its row with ``deleted`` set
(a tombstone hidden from readers); seeding or acquiring revives it, token and last fire kept. Every UPDATE bumps
the row's ``revision``, which :meth:`DjangoLockStore.write` (the control plane's compare-and-set) compares.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import Error, IntegrityError, OperationalError, connections, transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q, QuerySet

from mutexcron.errors import StoreUnavailable
from mutexcron.stores.base import AcquireRequest, AcquireStatus, Acquisition, LockState, LockStore, check_outcome
from mutexcron.stores.control import ControlStore

from ..models import Lock
from .clock import AsUTC, DbNow, aware, db_now, now_minus, now_plus, plus
from .databases import checked_alias, is_retryable, parse_django_url, sql_errors
from .states import (
    NOT_PAUSED,
    PAUSED,
    SLOT_LIVE,
    columns,
    free_for,
    lock_states,
    reserve_columns,
    reserved,
    slot_allows,
)

P = ParamSpec("P")
T = TypeVar("T")

_BUMP = {"revision": F("revision") + 1}  # in every UPDATE: ControlStore.write's compare-and-set sees each write


class DjangoLockStore(LockStore, ControlStore):
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
            created = self._locks.filter(name__in=wanted, deleted=True).update(  # revived
                deleted=False, **_BUMP)
            existing = set(self._locks.filter(name__in=wanted).values_list("name", flat=True))
            for name in wanted:
                if name not in existing:
                    created += self._insert(name=name, created_at=DbNow())
            return created

        return self._call(run)

    def _insert(self, attempts: int = 3, **row: Any) -> int:
        """Insert ``row`` unless another instance inserts its name at the same moment: 1 if this call created it.
        Two inserts of one new key can deadlock on MariaDB's gap locks; the loser tries again and finds the row."""
        for attempt in range(attempts):
            try:
                with transaction.atomic(using=self.using):
                    self._locks.create(**row)
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

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return self._call(lambda: self._locks.filter(name=name, locked=True, token=token)
                          .update(lock_until=now_plus(lease), **_BUMP) == 1)

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
                                                 last_released_at=DbNow(), tick_token=0, **finished, **_BUMP) == 1:
                    return True
                return mine.update(locked=False, lock_until=DbNow(), last_released_at=DbNow(), tick_token=0,
                                   **finished, **_BUMP) == 1

        return self._call(run)

    # -- the control plane (ControlStore): its verbs read a row, change it and write it back with write() --------

    def read(self, name: str) -> LockState | None:
        states = self._call(lambda: lock_states(self._locks.filter(name=name)))
        return states[0] if states else None

    def locks(self) -> list[LockState]:
        states = self._call(lambda: lock_states(self._locks.filter(deleted=False)))
        return sorted(states, key=lambda state: state.name)  # as Python sorts, whatever the database's collation

    def write(self, state: LockState, *, revision: int) -> bool:
        """One UPDATE of every column where the row's revision is ``revision``; a missing row (``revision`` 0) is
        inserted instead, unless another instance inserts it first."""
        row = columns(state)

        def run() -> bool:
            if self._locks.filter(name=state.name, revision=revision).update(**row, **_BUMP) == 1:
                return True
            return revision == 0 and self._insert(name=state.name, revision=1, **row) == 1

        return self._call(run)

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
    # tick_token before token: MySQL's SET sees the columns assigned before it
    changes: dict[str, Any] = {"locked": True, "locked_by": owner, "last_locked_at": DbNow(),
                               "lock_until": now_plus(lease), "tick_token": F("token") + 1, "token": F("token") + 1,
                               "deleted": False, "next_fire": None, "next_until": None, **_BUMP}
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

