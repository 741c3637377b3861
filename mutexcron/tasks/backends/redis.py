"""Delayed tasks in Redis: a hash per task, sorted sets for due and claimed tasks, Lua for every change.

This module is the backend; its worker loop and deliveries are in ``redis_consumer``, its scripts in
``redis_lua``. The keys, the claim protocol and the wake-ups are described in ``docs/redis-tasks.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from ..._common import clip_error, duration_ms, epoch_ms, ms_to_datetime
from ..._options import positive_duration
from ..._redis import RedisClient, client_from_url, eviction_policy
from ..._redis import text as _text
from ...errors import StoreConfigError
from ...urls import shown
from ..model import NewTask, TaskInfo, decode_trace_context, stored_payload, stored_status
from ..redis_records import RedisResultField
from . import redis_lua as lua
from .base import ClaimingBackend, ConsumeRequest
from .redis_consumer import RedisConsumer, RedisDelivery

__all__ = ["RedisDelivery", "RedisTaskBackend"]

DEFAULT_PREFIX = "mutexcron:"
HASH_TAG = "{tasks}"
DEFAULT_RETENTION = timedelta(days=7)  # how long status() still answers for a succeeded or cancelled task
DEFAULT_MAX_IDLE = timedelta(seconds=60)  # a worker that knows of nothing due looks again after this
ENQUEUE_CHUNK = 500  # tasks per enqueue script call (each call blocks Redis for about a millisecond)


def _duration(value: timedelta | float, name: str) -> timedelta:
    return positive_duration(value, what=f"Redis task backend: {name}", error=StoreConfigError)


class RedisTaskBackend(RedisClient, ClaimingBackend):
    """Delayed tasks in Redis (see ``docs/redis-tasks.md`` for the keys and the protocol)."""

    kind = "Redis task backend"

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        url: str | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
        max_idle: timedelta | float = DEFAULT_MAX_IDLE,
    ) -> None:
        self._bind(client, prefix, url)
        super().__init__()
        self.base = f"{prefix}{HASH_TAG}:"
        self.processing_key = self.base + "processing"
        self.failed_key = self.base + "failed"
        self.types_key = self.base + "types"
        self.channel = self.base + "wake"
        self.retention = _duration(retention, "retention")
        self.max_idle = _duration(max_idle, "max_idle")
        self._enqueue = client.register_script(lua.ENQUEUE)
        self._claim = client.register_script(lua.CLAIM)
        self._extend = client.register_script(lua.EXTEND)
        self._ack = client.register_script(lua.ACK)
        self._retry_later = client.register_script(lua.RETRY_LATER)
        self._fail = client.register_script(lua.FAIL)
        self._release = client.register_script(lua.RELEASE)
        self._cancel = client.register_script(lua.CANCEL)
        self._retry = client.register_script(lua.RETRY)
        self._pending = client.register_script(lua.PENDING)
        self._results = RedisResultField(client, self.errors)

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | None = None, **options: Any) -> RedisTaskBackend:
        """``redis://[:password@]host[:port][/db][?prefix=…]``; also ``rediss://`` and ``unix://``.

        ``retention`` and ``max_idle`` (timedelta or seconds) go to the backend, other options to
        ``redis.Redis.from_url``.
        """
        if cancel_store is not None:
            raise StoreConfigError(
                "the Redis task backend cancels atomically in Redis itself: it takes no cancel_store "
                f"(given {shown(cancel_store)})"
            )
        backend_options = {name: options.pop(name) for name in ("retention", "max_idle") if name in options}
        options.setdefault("health_check_interval", 30)  # a worker's idle pub/sub connection is pinged
        client, cleaned, query = client_from_url(url, ("prefix",), **options)
        return cls(client, prefix=query.get("prefix", DEFAULT_PREFIX), url=cleaned, **backend_options)

    # -- keys --------------------------------------------------------------------------------

    def task_key(self, task_id: str) -> str:
        return f"{self.base}task:{task_id}"

    def due_key(self, task_type: str) -> str:
        return f"{self.base}due:{task_type}"

    # -- producing --------------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        with self.errors():
            pipe = self.client.pipeline(transaction=False)
            for start in range(0, len(tasks), ENQUEUE_CHUNK):
                keys: list[str] = []
                args: list[Any] = [self.channel]
                for task in tasks[start : start + ENQUEUE_CHUNK]:
                    keys += [self.task_key(task.id), self.due_key(task.task_type)]
                    args += [task.id, task.task_type, task.payload, epoch_ms(task.run_at), task.trace_context or ""]
                self._enqueue(keys=keys, args=args, client=pipe)
            pipe.execute()

    def cancel(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False
        with self.errors():
            return bool(self._cancel(keys=[self.task_key(task_id)],
                                     args=[task_id, self.base, duration_ms(self.retention)]))

    def info(self, task_id: str) -> TaskInfo | None:
        if not isinstance(task_id, str) or not task_id:
            return None
        data = self.read_hash(self.task_key(task_id))
        if not data:
            return None
        return TaskInfo(
            id=task_id,
            task_type=data.get("type", ""),
            payload=stored_payload(data.get("payload", "null")),
            run_at=ms_to_datetime(data.get("run_at")) or datetime.fromtimestamp(0, UTC),
            status=stored_status(data.get("status")),
            attempts=int(data.get("attempts") or 0),
            error=data.get("error") or None,
        )

    def retry(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False
        with self.errors():
            return bool(self._retry(keys=[self.task_key(task_id), self.failed_key],
                                    args=[task_id, self.base, self.channel]))

    def pending_counts(self) -> Mapping[str, int]:
        """One script: the size of each type's due set (a type scheduled before ``<prefix>{tasks}:types``
        existed is counted once a task of it is due again: scheduled, retried or requeued)."""
        with self.errors():
            flat = self._pending(keys=[self.types_key], args=[self.base])
        return {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    @property
    def pending_source(self) -> str:
        return f"redis {self._display} {self.base}"

    def store_result(self, task_id: str, text: str) -> bool:
        """A field of the task's hash: it expires with the task, and a retry keeps it."""
        return self._results.store(self.task_key(task_id), text)

    def load_result(self, task_id: str) -> str | None:
        return self._results.load(self.task_key(task_id))

    def failed(self, limit: int = 100) -> list[str]:
        """Ids of failed tasks, most recent first."""
        with self.errors():
            ids: list[bytes | str] = self.client.zrevrange(self.failed_key, 0, max(0, limit - 1))  # type: ignore[assignment]
        return [_text(i) for i in ids]

    # -- consuming --------------------------------------------------------------------------------

    def consumer(self, request: ConsumeRequest) -> RedisConsumer:
        return RedisConsumer(self, request)

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None if CONFIG is not allowed): an ``allkeys-*`` one may evict tasks."""
        with self.errors():
            return eviction_policy(self.client)

    # -- the claim protocol: what a worker's consumer, deliveries and heartbeat call -----------------
    # Each settling call is fenced by the claim's token; False: the claim expired and the task moved on.

    def claim_batch(
        self, types: list[str], limit: int, owner: str, visibility_ms: list[int]
    ) -> tuple[int, int, list[RedisDelivery]]:
        """Claim up to ``limit`` due tasks of ``types`` (requeueing expired claims first). Returns the server
        time, the earliest due score or deadline of these types (-1: none) and the deliveries (ms)."""
        keys = [self.processing_key, *(self.due_key(t) for t in types)]
        with self.errors():
            now, next_ms, rows = self._claim(keys=keys, args=[self.base, self.channel, limit, owner, *visibility_ms])
        by_type = dict(zip(types, visibility_ms, strict=True))
        deliveries = []
        for task_id, task_type, payload, attempt, token, due, trace in rows:
            task_type = _text(task_type)
            deliveries.append(RedisDelivery(
                self, _text(task_id), task_type, _text(payload), int(attempt), str(token), by_type[task_type],
                due=ms_to_datetime(int(due)), trace_context=decode_trace_context(_text(trace)),
            ))
        return int(now), int(next_ms), deliveries

    def extend_claims(self, claims: Sequence[tuple[str, str, int]]) -> list[bool]:
        """Extend each (task id, token, visibility ms) claim to now + its visibility; whether each is still held."""
        args: list[Any] = [self.base]
        for task_id, token, visibility_ms in claims:
            args += [task_id, token, visibility_ms]
        with self.errors():
            return [bool(ok) for ok in self._extend(keys=[self.processing_key], args=args)]

    def ack_claim(self, task_id: str, token: str) -> bool:
        with self.errors():
            return bool(self._ack(keys=[self.task_key(task_id), self.processing_key],
                                  args=[task_id, token, duration_ms(self.retention)]))

    def retry_claim_later(self, task_id: str, task_type: str, token: str, delay: timedelta, error: str) -> bool:
        keys = [self.task_key(task_id), self.processing_key, self.due_key(task_type)]
        args: list[str | int] = [task_id, token, duration_ms(delay), clip_error(error), self.channel, task_type]
        with self.errors():
            return bool(self._retry_later(keys=keys, args=args))

    def fail_claim(self, task_id: str, token: str, error: str) -> bool:
        keys = [self.task_key(task_id), self.processing_key, self.failed_key]
        with self.errors():
            return bool(self._fail(keys=keys, args=[task_id, token, clip_error(error)]))

    def release_claim(self, task_id: str, task_type: str, token: str) -> bool:
        """Give a claimed task back unrun: due again at its due time, the attempt not counted."""
        keys = [self.task_key(task_id), self.processing_key, self.due_key(task_type)]
        with self.errors():
            return bool(self._release(keys=keys, args=[task_id, token, self.channel, task_type]))
