"""Task records for brokers that cannot look a message up: status, attempts, error, payload, cancel mark.

A message broker (RabbitMQ) holds a delayed task as a message that nobody can find, change or delete
before it is delivered. So the backend keeps one small record per task beside the broker, and the
consumer asks the record before it runs a delivered message:

* ``cancel(id)`` flips ``scheduled`` to ``cancelled`` atomically; the message still arrives at its
  due time and is then dropped unrun. A scheduled or cancelled record does not expire: its message
  may arrive however late (workers down for longer than the retention), and must still find it.
* ``claim(...)`` flips ``scheduled`` to ``running`` atomically before the handler runs; ``cancel`` and
  ``claim`` race on one record, so exactly one of them wins.
* Every message carries a *generation* (``gen``): 1 when scheduled, +1 for every re-publish (a retry
  after a failure, a retry by hand). A record only accepts messages of its current generation or
  newer, so a stale copy (a redelivered original whose retry was already published) is dropped.

The interface is small so that a SQL implementation (Django) can sit beside the Redis one: every
method is one atomic compare-and-set on one record (an ``UPDATE … WHERE status = … AND gen = …``).
Stores are picked by URL with :func:`cancel_marks_from_url`; add a scheme to :data:`SCHEMES`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar

from ..errors import StoreConfigError, StoreUnavailable
from ..plugins import class_for_scheme, schemes
from ..urls import mask_url, shown
from .model import NewTask, TaskInfo, TaskStatus

__all__ = [
    "SCHEMES",
    "CancelMarkStore",
    "Claim",
    "RedisCancelMarks",
    "TaskRecord",
    "Verdict",
    "cancel_marks_from_url",
]

DEFAULT_RETENTION = timedelta(days=7)
DEFAULT_PREFIX = "mutexcron:taskmark:"
MAX_ERROR_CHARS = 20_000


class Verdict(StrEnum):
    """What a consumer does with a delivered message, as :meth:`CancelMarkStore.claim` decides."""

    RUN = "run"  # claimed: run the handler
    CANCELLED = "cancelled"  # cancelled before it started: drop it
    DONE = "done"  # this generation already succeeded or failed (a redelivery after the outcome): drop it
    STALE = "stale"  # an older generation than the record's (its retry was already published): drop it
    DUPLICATE = "duplicate"  # a second copy of a generation that is running on a live consumer: drop it
    MISSING = "missing"  # no record (never scheduled, lost, or expired after its message came): never run it


@dataclass(frozen=True)
class Claim:
    verdict: Verdict
    attempts: int  # the attempt number this run is (after the claim), or the record's count


@dataclass(frozen=True)
class TaskRecord:
    """One task's record; ``payload`` is JSON text, ``run_at`` aware UTC."""

    id: str
    task_type: str
    payload: str
    run_at: datetime
    status: TaskStatus
    attempts: int
    gen: int
    error: str | None = None

    def info(self) -> TaskInfo:
        try:
            payload = json.loads(self.payload) if self.payload else None
        except ValueError:
            payload = self.payload
        return TaskInfo(
            id=self.id, task_type=self.task_type, payload=payload, run_at=self.run_at, status=self.status,
            attempts=self.attempts, error=self.error,
        )


class CancelMarkStore(ABC):
    """Task records beside a broker. Every method raises :class:`StoreUnavailable` on connection errors.

    ``retention`` is how long a record is kept once its message has arrived (so that a finished task can
    be inspected, and a late copy of its message is still fenced): a claim, a finish, and a cancelled
    message's arrival set the expiry to now + ``retention``. Until its message arrives a
    record (scheduled, or cancelled) never expires, so a cancel holds however late workers start; a
    failed task is kept until it is retried (as the Redis task backend keeps it).
    """

    retention: timedelta = DEFAULT_RETENTION

    @abstractmethod
    def create(self, tasks: Sequence[NewTask]) -> None:
        """Write ``scheduled`` records (generation 1, no attempts) before their messages are published."""

    @abstractmethod
    def discard(self, task_ids: Sequence[str]) -> None:
        """Delete records whose messages could not be published."""

    @abstractmethod
    def get(self, task_id: str) -> TaskRecord | None:
        """The record, or None."""

    @abstractmethod
    def cancel(self, task_id: str) -> bool:
        """``scheduled`` -> ``cancelled``; False for anything else (started, finished, already cancelled, unknown)."""

    @abstractmethod
    def claim(self, task_id: str, *, gen: int, attempt: int, redelivered: bool) -> Claim:
        """Decide what to do with a delivered message of generation ``gen``, and claim it if it should run.

        * no record -> MISSING (the consumer runs nothing without a record: it may have been cancelled);
        * cancelled -> CANCELLED (the record now expires after the retention);
        * older generation -> STALE; succeeded -> DONE;
        * same generation: failed -> DONE; running and not ``redelivered`` -> DUPLICATE;
        * otherwise (scheduled; running and redelivered, i.e. the broker saw its consumer go; a newer
          generation whose record update has not landed yet) -> RUN: status ``running``, generation
          ``gen``, attempts + 1 (a run whose consumer died counts as an attempt) or, for a newer
          generation, the message's own ``attempt`` number.
        """

    @abstractmethod
    def finish(self, task_id: str, *, gen: int, status: TaskStatus, error: str | None = None) -> bool:
        """``running`` generation ``gen`` -> ``succeeded`` / ``failed`` / ``cancelled``; False if it moved on."""

    @abstractmethod
    def reschedule(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime, error: str) -> bool:
        """``running`` generation ``gen`` -> ``scheduled`` generation ``new_gen`` (its retry was published)."""

    @abstractmethod
    def reopen(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime) -> bool:
        """``failed`` generation ``gen`` -> ``scheduled`` generation ``new_gen``, no attempts (retry by hand).

        Also True if the record is already at ``new_gen`` or later: the re-published message overtook this call.
        """

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""

    def _ttl_ms(self, run_at: datetime) -> int:
        ahead = max(run_at - datetime.now(UTC), timedelta(0))
        return max(1, round((ahead + self.retention).total_seconds() * 1000))


# -- Redis ------------------------------------------------------------------------------------------

# ARGV: type, payload, run_at_ms (no expiry until the message arrives)
_CREATE = """
redis.call('HSET', KEYS[1], 'type', ARGV[1], 'payload', ARGV[2], 'run_at', ARGV[3], 'status', 'scheduled',
           'attempts', '0', 'gen', '1', 'error', '')
redis.call('PERSIST', KEYS[1])
return 1
"""

_CANCEL = """
if redis.call('HGET', KEYS[1], 'status') ~= 'scheduled' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'cancelled')
return 1
"""

# ARGV: gen, redelivered ('1'/'0'), ttl_ms, attempt -> {verdict, attempts}
_CLAIM = """
local h = redis.call('HMGET', KEYS[1], 'status', 'gen', 'attempts')
local status = h[1]
if not status then return {'missing', '0'} end
local gen = tonumber(h[2]) or 1
local attempts = tonumber(h[3]) or 0
local mgen = tonumber(ARGV[1])
if status == 'cancelled' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])  -- its message has come: keep the mark for the retention only
  return {'cancelled', tostring(attempts)}
end
if mgen < gen then return {'stale', tostring(attempts)} end
if status == 'succeeded' then return {'done', tostring(attempts)} end
if mgen == gen then
  if status == 'failed' then return {'done', tostring(attempts)} end
  if status == 'running' and ARGV[2] ~= '1' then return {'duplicate', tostring(attempts)} end
  attempts = attempts + 1
else
  attempts = tonumber(ARGV[4])
end
redis.call('HSET', KEYS[1], 'status', 'running', 'gen', tostring(mgen), 'attempts', tostring(attempts))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'run', tostring(attempts)}
"""

# ARGV: gen, status, error, ttl_ms (a failed task is kept until it is retried: no expiry)
_FINISH = """
local h = redis.call('HMGET', KEYS[1], 'status', 'gen')
if h[1] ~= 'running' or tonumber(h[2]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'error', ARGV[3])
if ARGV[2] == 'failed' then redis.call('PERSIST', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 1
"""

# ARGV: gen, new_gen, run_at_ms, error (scheduled again: no expiry until the message arrives)
_RESCHEDULE = """
local h = redis.call('HMGET', KEYS[1], 'status', 'gen')
if h[1] ~= 'running' or tonumber(h[2]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'gen', ARGV[2], 'run_at', ARGV[3], 'error', ARGV[4])
redis.call('PERSIST', KEYS[1])
return 1
"""

# ARGV: gen, new_gen, run_at_ms (scheduled again: no expiry until the message arrives)
_REOPEN = """
local h = redis.call('HMGET', KEYS[1], 'status', 'gen')
if not h[1] then return 0 end
if h[1] == 'failed' and tonumber(h[2]) == tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'status', 'scheduled', 'gen', ARGV[2], 'run_at', ARGV[3], 'attempts', '0')
  redis.call('PERSIST', KEYS[1])
  return 1
end
if h[1] ~= 'cancelled' and tonumber(h[2]) >= tonumber(ARGV[2]) then return 1 end
return 0
"""

P = ParamSpec("P")
T = TypeVar("T")


def retention_option(url: str, options: dict[str, str]) -> timedelta:
    """A cancel store URL's ``?retention=<seconds>`` (how long finished records are kept), or the default."""
    if "retention" not in options:
        return DEFAULT_RETENTION
    try:
        return timedelta(seconds=float(options["retention"]))
    except (ValueError, OverflowError):
        raise StoreConfigError(
            f"cancel store URL {mask_url(url)!r}: retention={options['retention']!r} is not a number of seconds"
        ) from None


class RedisCancelMarks(CancelMarkStore):
    """Records as Redis hashes at ``<prefix>{<task id>}``, each change one Lua script on one key (Cluster-safe)."""

    def __init__(
        self, client: Any, *, prefix: str = DEFAULT_PREFIX, retention: timedelta = DEFAULT_RETENTION,
        url: str | None = None,
    ) -> None:
        from .._redis import check_key_prefix  # imports redis-py, which only Redis users install

        check_key_prefix(prefix)
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise StoreConfigError(f"cancel store retention must be a positive duration, not {retention!r}")
        self.client = client
        self.prefix = prefix
        self.retention = retention
        self._display = mask_url(url) if url else repr(client)
        self._create = client.register_script(_CREATE)
        self._cancel = client.register_script(_CANCEL)
        self._claim = client.register_script(_CLAIM)
        self._finish = client.register_script(_FINISH)
        self._reschedule = client.register_script(_RESCHEDULE)
        self._reopen = client.register_script(_REOPEN)

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> RedisCancelMarks:
        """``redis://[:password@]host[:port][/db][?prefix=…&retention=<seconds>]``; also ``rediss://``, ``unix://``."""
        from .._redis import client_from_url

        client, cleaned, options = client_from_url(url, ("prefix", "retention"), **client_options)
        return cls(client, prefix=options.get("prefix", DEFAULT_PREFIX), retention=retention_option(url, options),
                   url=cleaned)

    def key(self, task_id: str) -> str:
        return f"{self.prefix}{{{task_id}}}"

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        import redis

        try:
            return operation(*args, **kwargs)
        except redis.RedisError as error:
            raise StoreUnavailable(f"task cancel store (Redis) {self._display}: {error}") from error

    def create(self, tasks: Sequence[NewTask]) -> None:
        def run() -> None:
            pipe = self.client.pipeline(transaction=False)
            for task in tasks:
                args = [task.task_type, task.payload, _ms(task.run_at)]
                self._create(keys=[self.key(task.id)], args=args, client=pipe)
            pipe.execute()

        if tasks:
            self._call(run)

    def discard(self, task_ids: Sequence[str]) -> None:
        if task_ids:
            self._call(self.client.delete, *(self.key(task_id) for task_id in task_ids))

    def get(self, task_id: str) -> TaskRecord | None:
        raw = self._call(self.client.hgetall, self.key(task_id))
        if not raw:
            return None
        data = {_text(key): _text(value) for key, value in raw.items()}
        return TaskRecord(
            id=task_id,
            task_type=data.get("type", ""),
            payload=data.get("payload", ""),
            run_at=datetime.fromtimestamp(int(data.get("run_at") or 0) / 1000, UTC),
            status=TaskStatus(data.get("status", "unknown")),
            attempts=int(data.get("attempts") or 0),
            gen=int(data.get("gen") or 1),
            error=data.get("error") or None,
        )

    def cancel(self, task_id: str) -> bool:
        return bool(self._call(self._cancel, keys=[self.key(task_id)]))

    def claim(self, task_id: str, *, gen: int, attempt: int, redelivered: bool) -> Claim:
        args = [gen, "1" if redelivered else "0", self._ttl_ms(datetime.now(UTC)), attempt]
        verdict, attempts = self._call(self._claim, keys=[self.key(task_id)], args=args)
        return Claim(Verdict(_text(verdict)), int(attempts))

    def finish(self, task_id: str, *, gen: int, status: TaskStatus, error: str | None = None) -> bool:
        if status not in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED):
            raise ValueError(f"finish() takes succeeded, failed or cancelled, not {status!r}")
        args = [gen, status.value, _clip(error), self._ttl_ms(datetime.now(UTC))]
        return bool(self._call(self._finish, keys=[self.key(task_id)], args=args))

    def reschedule(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime, error: str) -> bool:
        args = [gen, new_gen, _ms(run_at), _clip(error)]
        return bool(self._call(self._reschedule, keys=[self.key(task_id)], args=args))

    def reopen(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime) -> bool:
        args = [gen, new_gen, _ms(run_at)]
        return bool(self._call(self._reopen, keys=[self.key(task_id)], args=args))

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None if CONFIG is not allowed). Records carry a TTL, so any policy
        but ``noeviction`` may evict one early."""
        from .._redis import eviction_policy

        return self._call(eviction_policy, self.client)

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<RedisCancelMarks {self._display} prefix={self.prefix!r}>"


# -- choosing a store by URL ---------------------------------------------------------------------------

# scheme -> dotted path of the store class (imported on first use); other packages add theirs (mutexcron.plugins)
SCHEMES = schemes("record_store")


def cancel_marks_from_url(url: str | CancelMarkStore | None, *, backend: str = "this task backend") -> CancelMarkStore:
    """A record store from a URL (``redis://…``) or a :class:`CancelMarkStore` object."""
    if isinstance(url, CancelMarkStore):
        return url
    if url is None or url == "":
        raise StoreConfigError(
            f"{backend} needs a cancel store for task status and cancellation: "
            "pass cancel_store='redis://…' (TaskQueue(url, cancel_store=…))"
        )
    if not isinstance(url, str) or "://" not in url:
        raise StoreConfigError(f"cancel store must be a URL (redis://…), not {shown(url)}")
    return class_for_scheme(url, SCHEMES, "cancel store").from_url(url)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ms(value: datetime) -> int:
    return round(value.timestamp() * 1000)


def _clip(error: str | None) -> str:
    if not error:
        return ""
    return error if len(error) <= MAX_ERROR_CHARS else "…" + error[-MAX_ERROR_CHARS:]
