"""Delayed tasks in Redis: a hash per task, sorted sets for due and claimed tasks, Lua for every change.

Every key of a task type is under that type's hash tag, so types spread over a Redis Cluster's shards while each
script stays in one slot. This module is the backend; its worker loop and deliveries are in ``consumer``, its
scripts in ``lua``. The keys, the claim protocol and the wake-ups are described in ``docs/redis-tasks.md``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from redis.crc import key_slot

from ...._common import clip_error, duration_ms, epoch_ms, ms_to_datetime
from ...._options import positive_duration
from ....errors import StoreConfigError
from ....redis.client import AnyRedis, RedisClient
from ....redis.client import text as _text
from ....redis.cluster import ScriptCall, queue_script, run_batch
from ....redis.urls import client_from_url, is_cluster
from ....urls import shown
from ...model import NewTask, TaskInfo, decode_trace_context, stored_payload
from ...records.redis import RedisResultField, record_from_hash
from ..base import ClaimingBackend, ConsumeRequest
from . import lua
from .consumer import RedisConsumer, RedisDelivery

__all__ = ["RedisDelivery", "RedisTaskBackend"]

logger = logging.getLogger("mutexcron.tasks.redis")
HASH_TAG = "{tasks}"  # of the keys every task type shares: the types set and the wake-up channel

DEFAULT_PREFIX = "mutexcron:"
DEFAULT_RETENTION = timedelta(days=7)  # how long status() still answers for a succeeded or cancelled task
DEFAULT_MAX_IDLE = timedelta(seconds=60)  # a worker that knows of nothing due looks again after this
ENQUEUE_CHUNK = 500  # tasks per enqueue script call (each call blocks Redis for about a millisecond)
KNOWN_TYPES = 10_000  # task ids whose type this process remembers (a lookup by id otherwise asks every type)


def _duration(value: timedelta | float, name: str) -> timedelta:
    return positive_duration(value, what=f"Redis task backend: {name}", error=StoreConfigError)


class RedisTaskBackend(RedisClient, ClaimingBackend):
    """Delayed tasks in Redis (see ``docs/redis-tasks.md`` for the keys and the protocol)."""

    kind = "Redis task backend"

    def __init__(
        self,
        client: AnyRedis,
        *,
        prefix: str = DEFAULT_PREFIX,
        url: str | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
        max_idle: timedelta | float = DEFAULT_MAX_IDLE,
    ) -> None:
        self._bind(client, prefix, url)
        super().__init__()
        self.base = f"{prefix}{HASH_TAG}:"
        self.types_key = self.base + "types"
        self.channel = self.base + "wake"
        self._type_of: OrderedDict[str, str] = OrderedDict()
        self._type_of_lock = threading.Lock()
        self._rounds = itertools.count()
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
        self._results = RedisResultField(client, self.errors)

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | None = None, **options: Any) -> RedisTaskBackend:
        """``redis://[:password@]host[:port][/db][?prefix=…]``; also ``rediss://``, ``unix://``, ``redis+cluster://``
        and ``redis+sentinel://`` (``mutexcron.redis.urls``).

        ``retention`` and ``max_idle`` (timedelta or seconds) go to the backend, other options to the client.
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

    def type_base(self, task_type: str) -> str:
        """Where every key of ``task_type`` starts: ``<prefix>{tasks:<type>}:``, its own hash tag."""
        return f"{self.prefix}{{tasks:{task_type}}}:"

    def task_key(self, task_type: str, task_id: str) -> str:
        return f"{self.type_base(task_type)}task:{task_id}"

    def due_key(self, task_type: str) -> str:
        return f"{self.type_base(task_type)}due"

    def processing_key(self, task_type: str) -> str:
        return f"{self.type_base(task_type)}processing"

    def failed_key(self, task_type: str) -> str:
        return f"{self.type_base(task_type)}failed"

    def _remember(self, task_id: str, task_type: str) -> None:
        with self._type_of_lock:
            self._type_of[task_id] = task_type
            self._type_of.move_to_end(task_id)
            while len(self._type_of) > KNOWN_TYPES:
                self._type_of.popitem(last=False)

    def types(self) -> list[str]:
        """Every task type ever scheduled here (``<prefix>{tasks}:types``). Raises as :meth:`errors`."""
        with self.errors():
            return sorted(_text(name) for name in self.client.smembers(self.types_key))

    def type_of(self, task_id: str) -> str | None:
        """The type of task ``task_id`` (None: no such task): remembered from this process's enqueues and claims,
        else looked up in one pipeline, one EXISTS per known type. Raises as :meth:`errors`."""
        with self._type_of_lock:
            known = self._type_of.get(task_id)
        if known is not None:
            return known
        types = self.types()
        with self.errors():
            pipe = self.client.pipeline(transaction=False)
            for task_type in types:
                pipe.exists(self.task_key(task_type, task_id))
            found = pipe.execute() if types else []
        for task_type, exists in zip(types, found, strict=True):
            if exists:
                self._remember(task_id, task_type)
                return task_type
        return None

    # -- producing --------------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        """One pipeline (on a cluster, one per node): the types into the types set, then one script per type
        and chunk of :data:`ENQUEUE_CHUNK` tasks."""
        by_type: dict[str, list[NewTask]] = {}
        for task in tasks:
            by_type.setdefault(task.task_type, []).append(task)
        if not by_type:
            return
        with self.errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.sadd(self.types_key, *by_type)
            for task_type, of_type in by_type.items():
                for start in range(0, len(of_type), ENQUEUE_CHUNK):
                    keys = [self.due_key(task_type)]
                    args: list[Any] = [self.channel, task_type]
                    for task in of_type[start : start + ENQUEUE_CHUNK]:
                        keys.append(self.task_key(task_type, task.id))
                        args += [task.id, task.payload, epoch_ms(task.run_at), task.trace_context or ""]
                    queue_script(pipe, self._enqueue, keys, args)
            pipe.execute()
        for task in tasks:
            self._remember(task.id, task.task_type)

    def _known_type(self, task_id: object) -> str | None:
        """The type of task ``task_id`` (see :meth:`type_of`), or None: no such task, or not an id at all (only a
        non-empty string is one). What cancel, info, retry and the results look up first."""
        if not isinstance(task_id, str) or not task_id:
            return None
        return self.type_of(task_id)

    def cancel(self, task_id: str) -> bool:
        task_type = self._known_type(task_id)
        if task_type is None:
            return False
        with self.errors():
            return bool(self._cancel(keys=[self.task_key(task_type, task_id), self.due_key(task_type)],
                                     args=[task_id, duration_ms(self.retention)]))

    def info(self, task_id: str) -> TaskInfo | None:
        task_type = self._known_type(task_id)
        data = {} if task_type is None else self.read_hash(self.task_key(task_type, task_id))
        if not data:
            return None
        # A task's payload field is JSON text, read as such even when empty (a record's empty one reads None).
        return replace(record_from_hash(task_id, data).info(), payload=stored_payload(data.get("payload", "null")))

    def retry(self, task_id: str) -> bool:
        task_type = self._known_type(task_id)
        if task_type is None:
            return False
        keys = [self.task_key(task_type, task_id), self.failed_key(task_type), self.due_key(task_type)]
        with self.errors():
            return bool(self._retry(keys=keys, args=[task_id, self.channel, task_type]))

    def pending_counts(self) -> Mapping[str, int]:
        """The size of each type's due set: the types set, then one pipeline of a ZCARD per type (on a cluster,
        one per node)."""
        types = self.types()
        with self.errors():
            pipe = self.client.pipeline(transaction=False)
            for task_type in types:
                pipe.zcard(self.due_key(task_type))
            counts = pipe.execute() if types else []
        return {task_type: int(count) for task_type, count in zip(types, counts, strict=True)}

    @property
    def pending_source(self) -> str:
        return f"redis {self._display} {self.base}"

    def store_result(self, task_id: str, text: str) -> bool:
        """A field of the task's hash: it expires with the task, and a retry keeps it."""
        task_type = self._known_type(task_id)
        return task_type is not None and self._results.store(self.task_key(task_type, task_id), text)

    def load_result(self, task_id: str) -> str | None:
        task_type = self._known_type(task_id)
        return None if task_type is None else self._results.load(self.task_key(task_type, task_id))

    def failed(self, limit: int = 100) -> list[str]:
        """Ids of failed tasks, most recent first: the newest ``limit`` of each type's failed set, merged."""
        types = self.types()
        with self.errors():
            pipe = self.client.pipeline(transaction=False)
            for task_type in types:
                pipe.zrevrange(self.failed_key(task_type), 0, max(0, limit - 1), withscores=True)
            replies = pipe.execute() if types else []
        newest = sorted(((score, _text(i)) for reply in replies for i, score in reply), reverse=True)
        return [task_id for _, task_id in newest[:limit]]

    # -- consuming --------------------------------------------------------------------------------

    def consumer(self, request: ConsumeRequest) -> RedisConsumer:
        return RedisConsumer(self, request)

    # -- the claim protocol: what a worker's consumer, deliveries and heartbeat call -----------------
    # Each settling call is fenced by the claim's token; False: the claim expired and the task moved on.

    def claim_groups(self, types: list[str]) -> list[list[str]]:
        """How ``types`` are claimed: together in one script on one server; on a cluster, one script per slot."""
        if not is_cluster(self.client):
            return [list(types)]
        groups: dict[int, list[str]] = {}
        for task_type in types:
            groups.setdefault(key_slot(self.due_key(task_type).encode()), []).append(task_type)
        return list(groups.values())

    def claim_batch(
        self, types: list[str], limit: int, owner: str, visibility_ms: list[int]
    ) -> tuple[int, int, list[RedisDelivery]]:
        """Claim up to ``limit`` due tasks of ``types`` (requeueing expired claims first). Returns the server
        time, the earliest due score or deadline of these types (-1: none) and the deliveries (ms). On a
        cluster, one script per slot, starting from another slot each time, until ``limit`` tasks are claimed."""
        by_type = dict(zip(types, visibility_ms, strict=True))
        groups = self.claim_groups(types)
        start = next(self._rounds) % len(groups)
        now, nexts = 0, list[int]()
        deliveries: list[RedisDelivery] = []
        for group in groups[start:] + groups[:start]:
            keys: list[str] = []
            args: list[Any] = [self.channel, limit - len(deliveries), owner]
            for task_type in group:
                keys += [self.processing_key(task_type), self.due_key(task_type)]
                args += [self.type_base(task_type), task_type, by_type[task_type]]
            with self.errors():
                now, next_ms, rows = self._claim(keys=keys, args=args)
            if int(next_ms) >= 0:
                nexts.append(int(next_ms))
            for task_id, task_type, payload, attempt, token, due, trace in rows:
                task_type, task_id = _text(task_type), _text(task_id)
                self._remember(task_id, task_type)
                deliveries.append(RedisDelivery(
                    self, task_id, task_type, _text(payload), int(attempt), str(token), by_type[task_type],
                    due=ms_to_datetime(int(due)), trace_context=decode_trace_context(_text(trace)),
                ))
            if len(deliveries) >= limit:
                break
        return int(now), min(nexts, default=-1), deliveries

    def extend_claims(self, claims: Sequence[tuple[str, str, str, int]]) -> list[bool]:
        """Extend each (task id, type, token, visibility ms) claim to now + its visibility; whether each is still
        held. One script per type, all in one pipeline (on a cluster, one per node)."""
        by_type: dict[str, list[tuple[int, str, str, int]]] = {}
        for index, (task_id, task_type, token, visibility_ms) in enumerate(claims):
            by_type.setdefault(task_type, []).append((index, task_id, token, visibility_ms))
        calls: list[ScriptCall] = []
        for task_type, of_type in by_type.items():
            args: list[Any] = [self.type_base(task_type)]
            for _, task_id, token, visibility_ms in of_type:
                args += [task_id, token, visibility_ms]
            calls.append(([self.processing_key(task_type)], args))
        with self.errors():
            replies = run_batch(self.client, self._extend, calls)
        held = [False] * len(claims)
        for of_type, reply in zip(by_type.values(), replies, strict=True):
            for (index, *_), ok in zip(of_type, reply, strict=True):
                held[index] = bool(ok)
        return held

    def ack_claim(self, task_id: str, task_type: str, token: str) -> bool:
        with self.errors():
            return bool(self._ack(keys=[self.task_key(task_type, task_id), self.processing_key(task_type)],
                                  args=[task_id, token, duration_ms(self.retention)]))

    def retry_claim_later(self, task_id: str, task_type: str, token: str, delay: timedelta, error: str) -> bool:
        keys = [self.task_key(task_type, task_id), self.processing_key(task_type), self.due_key(task_type)]
        args: list[str | int] = [task_id, token, duration_ms(delay), clip_error(error), self.channel, task_type]
        with self.errors():
            return bool(self._retry_later(keys=keys, args=args))

    def fail_claim(self, task_id: str, task_type: str, token: str, error: str) -> bool:
        keys = [self.task_key(task_type, task_id), self.processing_key(task_type), self.failed_key(task_type)]
        with self.errors():
            return bool(self._fail(keys=keys, args=[task_id, token, clip_error(error)]))

    def release_claim(self, task_id: str, task_type: str, token: str) -> bool:
        """Give a claimed task back unrun: due again at its due time, the attempt not counted."""
        keys = [self.task_key(task_type, task_id), self.processing_key(task_type), self.due_key(task_type)]
        with self.errors():
            return bool(self._release(keys=keys, args=[task_id, token, self.channel, task_type]))
