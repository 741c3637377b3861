"""Task records in Redis: one hash per task at ``<prefix>{<task id>}``, each change one Lua script on one key.

The Redis :class:`~mutexcron.tasks.records.base.TaskRecordStore` (``cancel_store="redis://…"``); one key per
script keeps it Redis Cluster-safe. :class:`RedisResultField` is the result slot the Redis task backend shares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

from ..._common import clip_error, duration_ms, epoch_ms, ms_to_datetime
from ...redis.client import AnyRedis, RedisClient
from ...redis.client import text as _text
from ...redis.cluster import run_batch
from ...redis.urls import client_from_url
from ..model import NewTask, TaskStatus, stored_status
from .base import (
    DEFAULT_PREFIX,
    DEFAULT_RETENTION,
    Claim,
    TaskRecord,
    TaskRecordStore,
    Verdict,
    check_retention,
    retention_option,
)

__all__ = ["RESULT_FIELD", "RedisResultField", "RedisTaskRecords", "record_from_hash"]

# The hash field of a record (or of a Redis task) that store_result() fills: the name results have been stored
# under from the start (django.tasks' results were its first use), kept so that stored results stay readable.
RESULT_FIELD = "django_result"

# -- Redis ------------------------------------------------------------------------------------------

# ARGV: type, payload, run_at_ms, trace context ('' for none) (no expiry until the message arrives).
# A live record (the key exists: an expired one is gone) is kept: 0.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'type', ARGV[1], 'payload', ARGV[2], 'run_at', ARGV[3], 'status', 'scheduled',
           'attempts', '0', 'gen', '1', 'error', '')
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'trace_context', ARGV[4])
else redis.call('HDEL', KEYS[1], 'trace_context') end
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

# Set a field of an existing hash only (ARGV: field, value): a record that expired (or was never there) is
# not brought back as a key without expiry. The Redis task backend keeps its results with it too.
_SET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


_EPOCH = datetime.fromtimestamp(0, UTC)  # the due time of a hash without one (written by hand)


def record_from_hash(task_id: str, data: Mapping[str, str]) -> TaskRecord:
    """A task's Redis hash (a record here, a task of the Redis task backend: the same fields) as a TaskRecord.
    Read leniently, so a hash written by hand never raises: a missing field takes its default, an unknown status
    reads UNKNOWN."""
    return TaskRecord(
        id=task_id,
        task_type=data.get("type", ""),
        payload=data.get("payload", ""),
        run_at=ms_to_datetime(data.get("run_at")) or _EPOCH,
        status=stored_status(data.get("status")),
        attempts=int(data.get("attempts") or 0),
        gen=int(data.get("gen") or 1),
        error=data.get("error") or None,
        trace_context=data.get("trace_context") or None,
    )


class RedisResultField:
    """The result slot of a record kept as a Redis hash: one field, written only while the hash exists.
    Redis errors become StoreUnavailable through its owner's ``errors`` context."""

    def __init__(self, client: AnyRedis, errors: Callable[[], AbstractContextManager[None]] = nullcontext) -> None:
        self.client = client
        self.errors = errors
        self._set = client.register_script(_SET_IF_EXISTS)

    def store(self, key: str, text: str) -> bool:
        with self.errors():
            return bool(self._set(keys=[key], args=[RESULT_FIELD, text]))

    def load(self, key: str) -> str | None:
        with self.errors():
            value = self.client.hget(key, RESULT_FIELD)
        return None if value is None else _text(value)


class RedisTaskRecords(RedisClient, TaskRecordStore):
    """Records as Redis hashes at ``<prefix>{<task id>}``, each change one Lua script on one key (Cluster-safe)."""

    kind = "task cancel store (Redis)"

    def __init__(
        self, client: AnyRedis, *, prefix: str = DEFAULT_PREFIX, retention: timedelta = DEFAULT_RETENTION,
        url: str | None = None,
    ) -> None:
        self._bind(client, prefix, url)
        self.retention = check_retention(retention)
        self._create = client.register_script(_CREATE)
        self._cancel = client.register_script(_CANCEL)
        self._claim = client.register_script(_CLAIM)
        self._finish = client.register_script(_FINISH)
        self._reschedule = client.register_script(_RESCHEDULE)
        self._reopen = client.register_script(_REOPEN)
        self._results = RedisResultField(client, self.errors)

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> RedisTaskRecords:
        """``redis://[:password@]host[:port][/db][?prefix=…&retention=<seconds>]``; also ``rediss://``, ``unix://``,
        ``redis+cluster://`` and ``redis+sentinel://`` (``mutexcron.redis.urls``)."""
        client, cleaned, options = client_from_url(url, ("prefix", "retention"), **client_options)
        return cls(client, prefix=options.get("prefix", DEFAULT_PREFIX), retention=retention_option(url, options),
                   url=cleaned)

    def key(self, task_id: str) -> str:
        return f"{self.prefix}{{{task_id}}}"

    def _ttl_ms(self, run_at: datetime) -> int:
        """Milliseconds until ``run_at`` plus the retention: how long a record whose message came lives."""
        return max(1, duration_ms(max(run_at - datetime.now(UTC), timedelta(0)) + self.retention))

    def create(self, tasks: Sequence[NewTask]) -> set[str]:
        if not tasks:
            return set()
        calls = [([self.key(task.id)], [task.task_type, task.payload, epoch_ms(task.run_at), task.trace_context or ""])
                 for task in tasks]
        with self.errors():
            written = run_batch(self.client, self._create, calls)  # on a cluster, one pipeline per node
        return {task.id for task, done in zip(tasks, written, strict=True) if int(done)}

    def discard(self, task_ids: Sequence[str]) -> None:
        if task_ids:
            with self.errors():
                self.client.delete(*(self.key(task_id) for task_id in task_ids))

    def get(self, task_id: str) -> TaskRecord | None:
        data = self.read_hash(self.key(task_id))
        return record_from_hash(task_id, data) if data else None

    def cancel(self, task_id: str) -> bool:
        with self.errors():
            return bool(self._cancel(keys=[self.key(task_id)]))

    def claim(self, task_id: str, *, gen: int, attempt: int, redelivered: bool) -> Claim:
        args = [gen, "1" if redelivered else "0", self._ttl_ms(datetime.now(UTC)), attempt]
        with self.errors():
            verdict, attempts = self._claim(keys=[self.key(task_id)], args=args)
        return Claim(Verdict(_text(verdict)), int(attempts))

    def finish(self, task_id: str, *, gen: int, status: TaskStatus, error: str | None = None) -> bool:
        if status not in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED):
            raise ValueError(f"finish() takes succeeded, failed or cancelled, not {status!r}")
        args: list[str | int] = [gen, status.value, clip_error(error), self._ttl_ms(datetime.now(UTC))]
        with self.errors():
            return bool(self._finish(keys=[self.key(task_id)], args=args))

    def reschedule(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime, error: str) -> bool:
        args: list[str | int] = [gen, new_gen, epoch_ms(run_at), clip_error(error)]
        with self.errors():
            return bool(self._reschedule(keys=[self.key(task_id)], args=args))

    def reopen(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime) -> bool:
        with self.errors():
            return bool(self._reopen(keys=[self.key(task_id)], args=[gen, new_gen, epoch_ms(run_at)]))

    def pending_counts(self) -> Mapping[str, int] | None:
        """None: each record is a key of its own (in its own Cluster slot), so counting the scheduled ones
        would read every record of the retention, not just the waiting ones; no index is kept for it."""
        return None

    def store_result(self, task_id: str, text: str) -> bool:
        return self._results.store(self.key(task_id), text)

    def load_result(self, task_id: str) -> str | None:
        return self._results.load(self.key(task_id))

