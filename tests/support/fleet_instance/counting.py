"""What a benchmark instance counts (``--jobs``, bench/celery_app.py): its store's calls, through a counting proxy, and
its client's round trips, as the S lines of its line file (bench/fleet_support.py reads them)."""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from mutexcron.errors import StoreUnavailable
from mutexcron.stores import AcquireRequest, Acquisition, ControlStore, LockState, LockStore, ReleaseRequest

JOB_PREFIX = "bench.j"


class Writer(Protocol):
    def line(self, *fields: object) -> None: ...


class Counts:
    """Thread-safe counters, read as a snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


COUNTS = Counts()


def job_index(name: str) -> int | None:
    """The index of a benchmark job (``bench.j00042``: 42), None for another name."""
    return int(name[len(JOB_PREFIX):]) if name.startswith(JOB_PREFIX) else None


def stats_line() -> str:
    """``S time cpu {counters}``: this process's CPU seconds (os.times) and counters, for a line file."""
    times = os.times()
    return f"S {time.time():.6f} {times.user + times.system:.3f} {json.dumps(COUNTS.snapshot(), separators=(',', ':'))}"


def count_redis_round_trips() -> None:
    """Count every request redis-py sends from this process (``rt.redis``): a command, or a whole pipeline, is
    one ``send_packed_command`` of a connection (also a cluster node's, and kombu's BRPOP)."""
    from redis.connection import AbstractConnection

    original: Callable[..., Any] = AbstractConnection.send_packed_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS.add("rt.redis")
        return original(self, *args, **kwargs)

    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def count_sql_round_trips() -> None:
    """Count every SQL statement Django sends (an execute wrapper on each new connection) and each commit and
    rollback of a transaction, which psycopg began with its own BEGIN."""
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.signals import connection_created

    def statement(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        COUNTS.add("rt.sql")
        return execute(sql, params, many, context)

    def created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        if statement not in connection.execute_wrappers:
            connection.execute_wrappers.append(statement)

    connection_created.connect(created, weak=False)
    for method in ("commit", "rollback"):
        original = getattr(BaseDatabaseWrapper, method)

        def counted(self: BaseDatabaseWrapper, _original: Callable[..., Any] = original, _key: str = method) -> Any:
            COUNTS.add(f"rt.sql_{_key}")
            return _original(self)

        setattr(BaseDatabaseWrapper, method, counted)


class CountingStore(LockStore, ControlStore):
    """A store that counts every call into the store it wraps (``calls.<method>``); with ``trace`` it writes F and A
    lines around each scheduled acquire of a benchmark job, and an L line for each release."""

    def __init__(self, inner: LockStore, trace: Writer | None = None) -> None:
        self.inner = inner
        self.control = cast(ControlStore, inner)  # the benchmarks' stores all have the control plane
        self._out = trace

    def __getattr__(self, name: str) -> Any:  # whatever else the scheduler may ask a store for
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def counted(*args: Any, **kwargs: Any) -> Any:
            COUNTS.add(f"calls.{name}")
            return value(*args, **kwargs)

        return counted

    def _traced(self, name: str, fire_time: datetime | None) -> tuple[int, float] | None:
        """With ``trace``, an F line for an acquire of a benchmark job's tick: (job, fire) for its A line."""
        if self._out is None or fire_time is None or (job := job_index(name)) is None:
            return None
        self._out.line("F", job, fire_time.timestamp(), f"{time.time():.6f}")
        return job, fire_time.timestamp()

    def _answered(self, where: tuple[int, float] | None, result: Acquisition | StoreUnavailable, done: str) -> None:
        if where is not None and self._out is not None and isinstance(result, Acquisition):
            self._out.line("A", *where, result.status.value, result.token if result.token is not None else "-", done,
                           result.holder or "-")

    def _released(self, name: str, token: int, sent: float, answered: float, released: bool) -> None:
        if self._out is not None and (job := job_index(name)) is not None:
            self._out.line("L", job, token, f"{sent:.6f}", f"{answered:.6f}", int(released))

    def seed(self, names: Iterable[str]) -> int:
        COUNTS.add("calls.seed")
        return self.inner.seed(names)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        COUNTS.add("calls.acquire")
        where = self._traced(name, fire_time)
        result = self.inner.acquire(name, owner=owner, lease=lease, fire_time=fire_time,
                                    schedule_version=schedule_version)
        self._answered(where, result, f"{time.time():.6f}")
        return result

    @property
    def batches_acquires(self) -> bool:  # type: ignore[override]
        return self.inner.batches_acquires

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        """The inner store's acquire_many (one round trip on Redis), each request counted and traced as an acquire."""
        COUNTS.add("calls.acquire_many")
        COUNTS.add("calls.acquire", len(requests))  # in one step: the count must not cost the fire path CPU
        if self._out is None:
            return self.inner.acquire_many(requests)
        traced = [self._traced(request.name, request.fire_time) for request in requests]
        results = self.inner.acquire_many(requests)
        done = f"{time.time():.6f}"
        for where, result in zip(traced, results, strict=True):
            self._answered(where, result, done)
        return results

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        COUNTS.add("calls.renew")
        return self.inner.renew(name, token=token, lease=lease)

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        COUNTS.add("calls.release")
        sent = time.time()
        released = self.inner.release(name, token=token, hold_at_least=hold_at_least, outcome=outcome, error=error)
        self._released(name, token, sent, time.time(), released)
        return released

    @property
    def batches_releases(self) -> bool:  # type: ignore[override]
        return self.inner.batches_releases

    def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
        """The inner store's release_many (one round trip on Redis), each request counted and traced as a release."""
        COUNTS.add("calls.release_many")
        sent = time.time()
        answers = self.inner.release_many(requests)
        answered = time.time()
        COUNTS.add("calls.release", len(requests))
        for request, answer in zip(requests, answers, strict=True):
            self._released(request.name, request.token, sent, answered, answer is True)
        return answers

    def locks(self) -> list[LockState]:
        COUNTS.add("calls.locks")
        return self.control.locks()

    def read(self, name: str) -> LockState | None:
        COUNTS.add("calls.read")
        return self.control.read(name)

    def write(self, state: LockState, *, revision: int) -> bool:
        COUNTS.add("calls.write")
        return self.control.write(state, revision=revision)

    def now(self) -> datetime:
        COUNTS.add("calls.now")
        return self.inner.now()

    def ping(self) -> None:
        COUNTS.add("calls.ping")
        self.inner.ping()

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"<counting {self.inner!r}>"
