"""Locks in Redis: one hash per job, each operation a single Lua script (one round trip, atomic).

The hash keeps every field of a :class:`LockState` as text: times as epoch milliseconds, '' for None, '1'/'0' for
flags. The control plane reads a hash whole and writes it whole with WRITE, a compare-and-set on its ``revision``,
which every script that changes the hash bumps. A deleted lock keeps its hash with ``deleted`` = 1 (a tombstone hidden
from ``lock`` and ``locks``), so its token, last fire time, lease, pause and schedule override survive; seeding or
acquiring revives it. One server, a Redis Cluster (each hash is its own slot: ``seed`` and ``locks`` go to every node)
or Sentinel (``mutexcron.redis.urls``); with ``wait_replicas`` an acquire counts only once that many replicas confirmed
it, and a write they did not confirm raises (docs/scaling-out.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import ResponseError

from .._options import positive_duration
from ..errors import ReplicationUnconfirmed, StoreConfigError, StoreUnavailable
from ..redis.client import AnyRedis, RedisClient, glob_escape
from ..redis.client import text as _text
from ..redis.cluster import (
    NOT_LOCAL,
    refresh_topology,
    run_batch,
    run_by_master,
    run_on_masters,
    scan_keys,
    write_then_wait,
)
from ..redis.urls import REDIS_ERRORS, client_from_url, is_cluster
from ..urls import mask_url
from . import redis_scripts as scripts
from .base import (
    AcquireRequest,
    AcquireStatus,
    Acquisition,
    LockState,
    LockStore,
    ReleaseRequest,
    check_outcome,
    datetime_to_ms,
    duration_ms,
    ms_to_datetime,
)
from .control import ControlStore

__all__ = ["RedisLockStore"]

DEFAULT_PREFIX = "mutexcron:lock:"
DEFAULT_WAIT_TIMEOUT = timedelta(milliseconds=200)  # how long a write waits for wait_replicas to confirm it
# Locks read by one READ_ALL script: a script holds the server while it runs, and 1,000 HGETALL take it about 1 ms.
READ_BATCH = 1_000

logger = logging.getLogger("mutexcron.stores.redis")


P = ParamSpec("P")
T = TypeVar("T")


def _acquire_args(request: AcquireRequest, attempt: str | None = None) -> list[str | int]:
    """ARGV of the acquire script: name, owner, lease (ms), fire time (ms, '' for a manual run), version (''), and
    an attempt id unique to the call (random; a batch's ids share one random part), which a retry repeats."""
    fire_ms = "" if request.fire_time is None else str(datetime_to_ms(request.fire_time))
    version = "" if request.schedule_version is None else str(request.schedule_version)
    return [request.name, request.owner, duration_ms(request.lease), fire_ms, version, attempt or os.urandom(8).hex()]


def _json(calls: Sequence[tuple[list[str], list[str | int]]]) -> str:
    """The arguments of a batch's calls as ACQUIRE_MANY and RELEASE_MANY take them: one JSON array of strings each."""
    return json.dumps([[str(arg) for arg in args] for _, args in calls], separators=(",", ":"))


def _one_by_one(calls: Sequence[tuple[list[str], list[str | int]]]) -> list[tuple[list[str], list[str | int]]]:
    """Each call as a batch of one, for ACQUIRE_MANY or RELEASE_MANY: on a cluster, each lock in its own slot."""
    return [(keys, [_json([(keys, args)])]) for keys, args in calls]


def _first(reply: Any) -> Any:
    """The one reply of a batch of one (or the error that came instead)."""
    return reply if isinstance(reply, Exception) else reply[0]


def _raised(reply: T | StoreUnavailable) -> T:
    """A batch's answer for a read that cannot be answered in part: its outage raised."""
    if isinstance(reply, StoreUnavailable):
        raise reply
    return reply


def _refused_flags(reply: Any) -> bool:
    """Whether a server refused an *_ON_MASTER script itself: one before Redis 7.0 cannot compile its flags line."""
    return isinstance(reply, ResponseError) and any(word in str(reply) for word in ("shebang", "compiling"))


_STATUSES = {status.value: status for status in AcquireStatus}


def _acquisition(status: Any, detail: Any) -> Acquisition:
    """The acquire script's reply {status, token or holder or version} as an Acquisition."""
    status, detail = _text(status), _text(detail)
    if status == "acquired":
        return Acquisition(AcquireStatus.ACQUIRED, token=int(detail))
    if status == "stale_schedule":
        return Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=int(detail))
    return Acquisition(_STATUSES[status], holder=detail or None)


class RedisLockStore(RedisClient, LockStore, ControlStore):
    """Lock hashes at ``<prefix>{<job name>}``; the braces make the name the Redis Cluster hash tag."""

    kind = "Redis store"

    def __init__(self, client: AnyRedis, *, prefix: str = DEFAULT_PREFIX, url: str | None = None,
                 wait_replicas: int = 0, wait_timeout: timedelta | float = DEFAULT_WAIT_TIMEOUT) -> None:
        self._bind(client, prefix, url)
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise StoreConfigError(f"Redis store: wait_replicas must be a whole number of replicas, "
                                   f"not {wait_replicas!r}")
        self.wait_replicas = wait_replicas
        self.wait_timeout = positive_duration(wait_timeout, what="Redis store: wait_timeout", error=StoreConfigError)
        # Fires due together are asked for together: one script for all the locks on one server; on a cluster,
        # one script per master (ACQUIRE_ON_MASTER), or one pipeline of scripts per master before Redis 7.0.
        self.batches_acquires = True
        self.batches_releases = True  # the same way
        self._on_masters = True  # the cluster runs the *_ON_MASTER scripts (False once a server refused one)
        self._seed = client.register_script(scripts.SEED)
        self._acquire = client.register_script(scripts.ACQUIRE)
        self._acquire_many = client.register_script(scripts.ACQUIRE_MANY)
        self._acquire_on_master = client.register_script(scripts.ACQUIRE_ON_MASTER)
        self._renew = client.register_script(scripts.RENEW)
        self._release = client.register_script(scripts.RELEASE)
        self._release_many = client.register_script(scripts.RELEASE_MANY)
        self._release_on_master = client.register_script(scripts.RELEASE_ON_MASTER)
        self._read_all = client.register_script(scripts.READ_ALL)
        self._read_on_master = client.register_script(scripts.READ_ON_MASTER)
        self._write = client.register_script(scripts.WRITE)

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> RedisLockStore:
        """``redis://[:password@]host[:port][/db][?prefix=…&wait_replicas=N&wait_timeout=<ms>]``; also ``rediss://``,
        ``unix://``, ``redis+cluster://`` and ``redis+sentinel://`` (``mutexcron.redis.urls``)."""
        client, cleaned, options = client_from_url(url, ("prefix", "wait_replicas", "wait_timeout"), **client_options)
        waits: dict[str, Any] = {}
        for name, value in options.items():
            if name in ("wait_replicas", "wait_timeout"):
                if not value.isdigit() or len(value) > 9:  # at most 999,999,999 (replicas; ms: 11 days)
                    client.close()
                    raise StoreConfigError(f"Redis store URL {mask_url(cleaned)!r}: {name} must be a whole number, "
                                           f"at most 999999999, not {value[:20]!r}")
                waits[name] = int(value) if name == "wait_replicas" else timedelta(milliseconds=int(value))
        return cls(client, prefix=options.get("prefix", DEFAULT_PREFIX), url=cleaned, **waits)

    def key(self, name: str) -> str:
        return f"{self.prefix}{{{name}}}"

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self.errors():
            return operation(*args, **kwargs)

    def seed(self, names: Iterable[str]) -> int:
        calls = [([self.key(name)], [name]) for name in dict.fromkeys(names)]
        return sum(int(created) for created in self._call(run_batch, self.client, self._seed, calls))

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        args = _acquire_args(AcquireRequest(name, owner, lease, fire_time, schedule_version))
        (status, detail), confirmed = self._confirmed(self._acquire, name, args)
        if _text(status) == "acquired" and confirmed < self.wait_replicas:
            token = int(_text(detail))
            try:  # not counted: released (best effort; its lease ends it otherwise), the run skipped as on any error
                self.release(name, token=token)
            except StoreUnavailable as error:
                logger.debug("could not release the unconfirmed lock of %r: %s", name, error)
            raise self._unconfirmed(f"the lock of {name!r}", confirmed, "not counted, released")
        return _acquisition(status, detail)

    def _confirmed(self, script: Script, name: str, args: list[str | int]) -> tuple[Any, int]:
        """A writing script's reply and, with ``wait_replicas``, how many replicas confirmed it (WAIT right behind it,
        on the key's master); without, 0."""
        if not self.wait_replicas:
            return self._call(script, keys=[self.key(name)], args=args), 0
        return self._call(write_then_wait, self.client, script, [self.key(name)], args, self.wait_replicas,
                          duration_ms(self.wait_timeout))

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        """One script for them all on one server (one command to send and one reply to read, where a pipeline of
        scripts cost the instance a command each); on a cluster, one per master. With ``wait_replicas``, one by
        one: each acquire is confirmed by WAIT on its own master."""
        if self.wait_replicas or len(requests) < 2:
            return super().acquire_many(requests)
        batch = os.urandom(8).hex()  # one random part for the batch (a call each cost the instance a syscall)
        calls = [([self.key(request.name)], _acquire_args(request, f"{batch}.{index}"))
                 for index, request in enumerate(requests)]
        return self._many((self._acquire_many, self._acquire_on_master), calls, lambda reply: _acquisition(*reply))

    def _many(self, scripts: tuple[Script, Script], calls: Sequence[tuple[list[str], list[str | int]]],
              convert: Callable[[Any], T]) -> list[T | StoreUnavailable]:
        """A batch script (ACQUIRE_MANY, RELEASE_MANY) for ``calls``, each lock's arguments as one JSON argument:
        one run on one server; on a cluster, its variant for one master (:meth:`_on_cluster`)."""
        if is_cluster(self.client):
            return [self._checked(reply, convert) for reply in self._on_cluster(self.client, scripts, calls)]
        try:
            replies = self._call(scripts[0], keys=[keys[0] for keys, _ in calls], args=[_json(calls)])
        except StoreUnavailable as error:  # whether the script ran is unknown: those locks end with their leases
            return [error] * len(calls)
        return [convert(reply) for reply in replies]

    def _on_cluster(self, cluster: RedisCluster, scripts: tuple[Script, Script],
                    calls: Sequence[tuple[list[str], list[str | int]]]) -> list[Any]:
        """The replies of ``calls`` on a cluster: one ``on_master`` script per master for the locks it serves; a
        lock whose slot moved, and every lock on a cluster that refuses such scripts (before Redis 7.0), one
        script run each by run_by_master, which follows the cluster's redirects."""
        script, on_master = scripts
        replies: list[Any] = [NOT_LOCAL] * len(calls)
        if self._on_masters:
            replies = run_on_masters(cluster, on_master, [(keys[0], [str(arg) for arg in args])
                                                              for keys, args in calls])
            if any(_refused_flags(reply) for reply in replies):
                logger.info("%s: the cluster refuses scripts over several slots; one script a lock", self._display)
                self._on_masters = False
                replies = [NOT_LOCAL if _refused_flags(reply) else reply for reply in replies]
        again = [index for index, reply in enumerate(replies) if isinstance(reply, bytes) and reply == NOT_LOCAL]
        if again:
            if self._on_masters:
                refresh_topology(cluster)  # a slot moved since the client read the map
            answers = run_by_master(cluster, script, _one_by_one([calls[index] for index in again]))
            for index, answer in zip(again, answers, strict=True):
                replies[index] = _first(answer)
        return replies

    def _checked(self, reply: Any, convert: Callable[[Any], T]) -> T | StoreUnavailable:
        """One script's reply in a pipeline, converted; its error as StoreUnavailable naming this store (an error
        that is not the server's is raised)."""
        if isinstance(reply, REDIS_ERRORS):
            return self.unavailable(reply)
        if isinstance(reply, Exception):
            raise reply
        return convert(reply)

    def _unconfirmed(self, what: str, confirmed: int, outcome: str) -> ReplicationUnconfirmed:
        """The error for a write that fewer than ``wait_replicas`` replicas confirmed."""
        return ReplicationUnconfirmed(
            f"{self.kind} {self._display}: {what} reached {confirmed} of {self.wait_replicas} replicas within "
            f"{duration_ms(self.wait_timeout)} ms (wait_replicas): {outcome}"
        )

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return bool(self._call(self._renew, keys=[self.key(name)], args=[token, duration_ms(lease)]))

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        args: list[str | int] = [token, duration_ms(hold_at_least), outcome or "", error or ""]
        return bool(self._call(self._release, keys=[self.key(name)], args=args))

    def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
        """One script for them all on one server; on a cluster, one pipeline per master."""
        if len(requests) < 2:
            return super().release_many(requests)
        calls: list[tuple[list[str], list[str | int]]] = [
            ([self.key(request.name)], [request.token, duration_ms(request.hold_at_least), request.outcome or "",
                                        check_outcome(request.outcome, request.error) or ""])
            for request in requests]
        return self._many((self._release_many, self._release_on_master), calls, bool)

    def read(self, name: str) -> LockState | None:
        return _state(name, self._call(self.client.hgetall, self.key(name)))

    def write(self, state: LockState, *, revision: int) -> bool:
        """WRITE: one compare-and-set on the revision. With ``wait_replicas``, a write that too few replicas confirmed
        raises ReplicationUnconfirmed though it was made: a failover may lose it (a take-over's token, then given
        again by the promoted replica), so its caller fails closed as on any store error."""
        args: list[str | int] = [revision, *_fields(state)]
        written, confirmed = self._confirmed(self._write, state.name, args)
        if written and confirmed < self.wait_replicas:
            raise self._unconfirmed(f"the write of {state.name!r}", confirmed, "written, not confirmed")
        return bool(written)

    def locks(self) -> list[LockState]:
        def run() -> list[LockState]:
            keys = list(scan_keys(self.client, glob_escape(self.prefix) + "{*}"))
            states = []
            for key, fields in zip(keys, self._read(keys), strict=True):
                name = _text(key)[len(self.prefix) + 1 : -1]
                state = _state(name, fields)
                if state is not None and not state.deleted:
                    states.append(state)
            return sorted(states, key=lambda state: state.name)

        return self._call(run)

    def _read(self, keys: list[Any]) -> list[Any]:
        """HGETALL of each key, in order, READ_BATCH keys at a time: READ_ALL on one server; on a cluster,
        READ_ON_MASTER once per master (:meth:`_on_cluster`)."""
        client = self.client
        documents: list[Any] = []
        for start in range(0, len(keys), READ_BATCH):
            batch = keys[start:start + READ_BATCH]
            if is_cluster(client):
                replies = self._on_cluster(client, (self._read_all, self._read_on_master),
                                           [([_text(key)], []) for key in batch])
                flat = [_raised(self._checked(reply, list)) for reply in replies]
            else:
                flat = self._read_all(keys=batch)
            documents.extend(dict(zip(fields[::2], fields[1::2], strict=True)) for fields in flat)
        return documents

    def now(self) -> datetime:
        """The server's clock in whole milliseconds, as the store keeps times: a state a control verb computes on it
        is the state read back."""
        seconds, micros = self._call(self.client.time)
        return datetime.fromtimestamp(seconds, UTC) + timedelta(milliseconds=micros // 1000)


# How each field of a LockState (but its name) is read from the hash's text, by its declared type; a missing field
# reads as '' (False, 0, None).
_DECODERS: dict[str, Callable[[str], Any]] = {
    "bool": lambda value: value == "1",
    "int": lambda value: int(value or 0),
    "datetime | None": ms_to_datetime,
    "str | None": lambda value: value or None,
}
_FIELDS = [(field.name, _DECODERS[str(field.type)]) for field in dataclasses.fields(LockState) if field.name != "name"]


def _state(name: str, fields: dict[Any, Any]) -> LockState | None:
    """The hash's fields as a LockState (a deleted one included), or None for no hash."""
    data = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()}  # _text inlined: a sync reads every field of every lock
    if not data:
        return None
    return LockState(name=name, **{field: decode(data.get(field, "")) for field, decode in _FIELDS})


def _fields(state: LockState) -> list[str]:
    """The document as WRITE's field, value pairs (_state's inverse): every field but ``revision``."""
    return [text for field in dataclasses.fields(state) if field.name != "revision"
            for text in (field.name, _encoded(getattr(state, field.name)))]


def _encoded(value: object) -> str:
    """A field's value as the hash keeps it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, datetime):
        return str(datetime_to_ms(value))
    return str(value)
