"""Delayed tasks in Redis: a hash per task, sorted sets for due and claimed tasks, Lua for every change.

Keys (all under one Redis Cluster hash tag, ``{tasks}``, so every script's keys live in one slot)::

    <prefix>{tasks}:task:<id>       hash: type, payload, run_at, due, status, attempts, claims, owner, error,
                                    created_at, updated_at, started_at, finished_at (times in ms, server clock)
    <prefix>{tasks}:due:<type>      zset: ids of scheduled tasks of that type, scored by due time (ms)
    <prefix>{tasks}:processing      zset: ids of claimed tasks, scored by visibility deadline (ms)
    <prefix>{tasks}:failed          zset: ids of tasks out of attempts, scored by when they failed
    <prefix>{tasks}:wake            pub/sub channel: "<ms> <type>" when a type's earliest due time moves
                                    earlier, "<ms> *" when the earliest visibility deadline does

Scripts declare the keys they know in advance; the few they learn inside Redis (the hash of a claimed id,
the due set of a cancelled task's type) are built from the same ``<prefix>{tasks}:`` base, so they are in
the same Cluster slot too.

A task moves between the sets only inside a script, so it is always in exactly one place: due (status
scheduled), processing (running), failed, or nowhere (succeeded or cancelled; the hash then expires after
the retention). ``claims`` counts claims and never goes back: it is the fencing token a delivery must
show to ack, fail, retry or extend its claim, so a worker whose claim expired cannot touch a task another
worker has taken since.

Workers do not poll. A claim returns the server time and the earliest moment anything could change for
the worker (the first due score of its types, the first visibility deadline); the worker sleeps on the
wake channel until then, and any script that makes something due earlier publishes that moment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

import redis

from ..._redis import check_key_prefix, client_from_url, eviction_policy
from ...errors import StoreConfigError, StoreUnavailable
from ...urls import mask_url, scrub
from ..model import NewTask, TaskInfo, TaskStatus
from .base import ClaimHeartbeat, ClaimingConsumer, Delivery, TaskBackend, consumed_types, run_batch, warn_stale_settle

__all__ = ["RedisDelivery", "RedisTaskBackend"]

logger = logging.getLogger("mutexcron.tasks.redis")

DEFAULT_PREFIX = "mutexcron:"
HASH_TAG = "{tasks}"
DEFAULT_RETENTION = timedelta(days=7)  # how long status() still answers for a succeeded or cancelled task
DEFAULT_MAX_IDLE = timedelta(seconds=60)  # a worker that knows of nothing due looks again after this
STOP_CHECK_SECONDS = 0.25  # a waiting worker notices a set ``stop`` within this, even without wake()
ENQUEUE_CHUNK = 500  # tasks per enqueue script call (each call blocks Redis for about a millisecond)
REQUEUE_LIMIT = 100  # expired claims moved back to due per claim call
MAX_ERROR_CHARS = 32_000

# Every script reads the time with TIME: due times, deadlines and timestamps use the Redis server's
# clock, not the workers' (which may disagree by seconds).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# Put a task into a due set; if that makes the type's earliest due time earlier, tell sleeping workers.
_ADD_DUE = """
local function add_due(dkey, score, id, ttype, channel)
  local head = redis.call('ZRANGE', dkey, 0, 0, 'WITHSCORES')
  redis.call('ZADD', dkey, score, id)
  if head[2] == nil or score < tonumber(head[2]) then
    redis.call('PUBLISH', channel, string.format('%d', score) .. ' ' .. ttype)
  end
end
"""

# KEYS: task hash, due set, then the same pair for each further task.
# ARGV: channel, then id, type, payload, run_at ms for each task. Returns how many were new.
_ENQUEUE = _NOW + _ADD_DUE + """
local created = 0
for i = 1, #KEYS / 2 do
  local hkey, dkey = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 1 + (i - 1) * 4
  local id, ttype, payload, run_at = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
  if redis.call('EXISTS', hkey) == 0 then
    redis.call('HSET', hkey, 'type', ttype, 'payload', payload, 'run_at', ARGV[a + 4], 'due', ARGV[a + 4],
               'status', 'scheduled', 'attempts', 0, 'claims', 0, 'created_at', now, 'updated_at', now)
    add_due(dkey, run_at, id, ttype, ARGV[1])
    created = created + 1
  end
end
return created
"""

# KEYS: processing, then one due set per task type.
# ARGV: key base, channel, limit, owner, then the visibility timeout (ms) of each type, in KEYS order.
# Returns {now, next, tasks}: next is the earliest due score of these types or visibility deadline
# (-1: none), tasks a list of {id, type, payload, attempt, token}.
_CLAIM = _NOW + _ADD_DUE + """
local base, channel, limit, owner = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local processing = KEYS[1]

-- 1. Claims whose visibility deadline passed belong to dead workers: their tasks are due again now.
local expired = redis.call('ZRANGEBYSCORE', processing, '-inf', now, 'LIMIT', 0, REQUEUE_LIMIT)
for _, id in ipairs(expired) do
  redis.call('ZREM', processing, id)
  local hkey = base .. 'task:' .. id
  local h = redis.call('HMGET', hkey, 'type', 'status', 'owner', 'attempts')
  if h[2] == 'running' then
    redis.call('HSET', hkey, 'status', 'scheduled', 'due', now, 'owner', '', 'updated_at', now,
               'error', 'visibility timeout: worker ' .. (h[3] or '?') .. ' did not finish attempt ' .. (h[4] or '?'))
    add_due(base .. 'due:' .. h[1], now, id, h[1], channel)
  end
end

-- 2. The earliest due tasks of these types, up to the limit.
local candidates = {}
for i = 2, #KEYS do
  local got = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for j = 1, #got, 2 do
    table.insert(candidates, {tonumber(got[j + 1]), got[j], i})
  end
end
if #KEYS > 2 then
  table.sort(candidates, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end
local first_deadline = redis.call('ZRANGE', processing, 0, 0, 'WITHSCORES')
local earliest_new = nil
local tasks = {}
for k = 1, math.min(limit, #candidates) do
  local c = candidates[k]
  local id = c[2]
  redis.call('ZREM', KEYS[c[3]], id)
  local hkey = base .. 'task:' .. id
  local h = redis.call('HMGET', hkey, 'type', 'payload', 'status')
  if h[3] == 'scheduled' then
    local attempt = redis.call('HINCRBY', hkey, 'attempts', 1)
    local token = redis.call('HINCRBY', hkey, 'claims', 1)
    local deadline = now + tonumber(ARGV[3 + c[3]])
    redis.call('HSET', hkey, 'status', 'running', 'owner', owner, 'started_at', now, 'updated_at', now)
    redis.call('ZADD', processing, deadline, id)
    if earliest_new == nil or deadline < earliest_new then earliest_new = deadline end
    table.insert(tasks, {id, h[1], h[2], attempt, token})
  end
end
-- Others must learn of the new deadline: if this worker dies, one of them takes its tasks.
if earliest_new ~= nil and (first_deadline[2] == nil or earliest_new < tonumber(first_deadline[2])) then
  redis.call('PUBLISH', channel, string.format('%d', earliest_new) .. ' *')
end

-- 3. When to look again.
local next = nil
for i = 1, #KEYS do
  local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if head[2] ~= nil then
    local score = tonumber(head[2])
    if next == nil or score < next then next = score end
  end
end
return {now, next or -1, tasks}
""".replace("REQUEUE_LIMIT", str(REQUEUE_LIMIT))

# KEYS: processing. ARGV: key base, then id, token, visibility timeout ms per claim. Returns 1/0 per claim.
_EXTEND = _NOW + """
local result = {}
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local h = redis.call('HMGET', ARGV[1] .. 'task:' .. id, 'status', 'claims')
  if h[1] == 'running' and h[2] == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[i + 2]), id)
    table.insert(result, 1)
  else
    table.insert(result, 0)
  end
end
return result
"""

_OWNED = """
local h = redis.call('HMGET', KEYS[1], 'status', 'claims')
if h[1] ~= 'running' or h[2] ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
"""

# KEYS: task, processing. ARGV: id, token, retention ms.
_ACK = _NOW + _OWNED + """
redis.call('HSET', KEYS[1], 'status', 'succeeded', 'owner', '', 'finished_at', now, 'updated_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: task, processing, due set of its type. ARGV: id, token, delay ms, error, channel, type.
_RETRY_LATER = _NOW + _ADD_DUE + _OWNED + """
local due = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'owner', '', 'due', due, 'error', ARGV[4], 'updated_at', now)
add_due(KEYS[3], due, ARGV[1], ARGV[6], ARGV[5])
return 1
"""

# KEYS: task, processing, failed. ARGV: id, token, error.
_FAIL = _NOW + _OWNED + """
redis.call('HSET', KEYS[1], 'status', 'failed', 'owner', '', 'error', ARGV[3], 'finished_at', now,
           'updated_at', now)
redis.call('ZADD', KEYS[3], now, ARGV[1])
return 1
"""

# A claimed task the worker will not run after all (it is stopping): due again at its due time, the
# attempt not counted. KEYS: task, processing, due set. ARGV: id, token, channel, type.
_RELEASE = _NOW + _ADD_DUE + _OWNED + """
local due = tonumber(redis.call('HGET', KEYS[1], 'due')) or now
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'owner', '', 'updated_at', now)
add_due(KEYS[3], due, ARGV[1], ARGV[4], ARGV[3])
return 1
"""

# KEYS: task. ARGV: id, key base, retention ms. Only a task still in its due set can be cancelled.
_CANCEL = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'type', 'status')
if h[2] ~= 'scheduled' then return 0 end
if redis.call('ZREM', ARGV[2] .. 'due:' .. h[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', now, 'updated_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: task, failed. ARGV: id, key base, channel.
_RETRY = _NOW + _ADD_DUE + """
local h = redis.call('HMGET', KEYS[1], 'type', 'status')
if h[2] ~= 'failed' then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'attempts', 0, 'due', now, 'updated_at', now)
redis.call('HDEL', KEYS[1], 'finished_at')
add_due(ARGV[2] .. 'due:' .. h[1], now, ARGV[1], h[1], ARGV[3])
return 1
"""

P = ParamSpec("P")
T = TypeVar("T")


def _ms(value: timedelta) -> int:
    return max(0, round(value.total_seconds() * 1000))


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def _from_ms(value: str | None) -> datetime | None:
    return datetime.fromtimestamp(int(value) / 1000, UTC) if value else None


def _duration(value: timedelta | float | int, name: str) -> timedelta:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise StoreConfigError(f"Redis task backend: {name} must be a positive timedelta or seconds, not {value!r}")
    return value


class RedisTaskBackend(TaskBackend):
    """Delayed tasks in Redis (see the module docstring for the keys and the protocol)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        url: str | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
        max_idle: timedelta | float = DEFAULT_MAX_IDLE,
    ) -> None:
        check_key_prefix(prefix)
        self.client = client
        self.prefix = prefix
        self.base = f"{prefix}{HASH_TAG}:"
        self.processing_key = self.base + "processing"
        self.failed_key = self.base + "failed"
        self.channel = self.base + "wake"
        self.retention = _duration(retention, "retention")
        self.max_idle = _duration(max_idle, "max_idle")
        self._url = url
        self._display = mask_url(url) if url else repr(client)
        self._consumers: set[str] = set()  # private wake channels of this process's running consume() calls
        self._lock = threading.Lock()
        self._enqueue = client.register_script(_ENQUEUE)
        self._claim = client.register_script(_CLAIM)
        self._extend = client.register_script(_EXTEND)
        self._ack = client.register_script(_ACK)
        self._retry_later = client.register_script(_RETRY_LATER)
        self._fail = client.register_script(_FAIL)
        self._release = client.register_script(_RELEASE)
        self._cancel = client.register_script(_CANCEL)
        self._retry = client.register_script(_RETRY)

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | None = None, **options: Any) -> RedisTaskBackend:
        """``redis://[:password@]host[:port][/db][?prefix=…]``; also ``rediss://`` and ``unix://``.

        ``retention`` and ``max_idle`` (timedelta or seconds) go to the backend, other options to
        ``redis.Redis.from_url``.
        """
        if cancel_store is not None:
            raise StoreConfigError(
                "the Redis task backend cancels atomically in Redis itself: it takes no cancel_store "
                f"(given {mask_url(cancel_store)!r})"
            )
        backend_options = {name: options.pop(name) for name in ("retention", "max_idle") if name in options}
        options.setdefault("health_check_interval", 30)  # a worker's idle pub/sub connection is pinged
        client, cleaned, query = client_from_url(url, ("prefix",), **options)
        return cls(client, prefix=query.get("prefix", DEFAULT_PREFIX), url=cleaned, **backend_options)

    # -- keys and errors --------------------------------------------------------------------------

    def task_key(self, task_id: str) -> str:
        return f"{self.base}task:{task_id}"

    def due_key(self, task_type: str) -> str:
        return f"{self.base}due:{task_type}"

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return operation(*args, **kwargs)
        except redis.RedisError as error:
            message = scrub(str(error), self._url) if self._url else str(error)
            raise StoreUnavailable(f"Redis task backend {self._display}: {message}") from error

    # -- producing --------------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        def run() -> None:
            pipe = self.client.pipeline(transaction=False)
            for start in range(0, len(tasks), ENQUEUE_CHUNK):
                keys: list[str] = []
                args: list[Any] = [self.channel]
                for task in tasks[start : start + ENQUEUE_CHUNK]:
                    keys += [self.task_key(task.id), self.due_key(task.task_type)]
                    args += [task.id, task.task_type, task.payload, _datetime_ms(task.run_at)]
                self._enqueue(keys=keys, args=args, client=pipe)
            pipe.execute()

        self._call(run)

    def cancel(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False
        args = [task_id, self.base, _ms(self.retention)]
        return bool(self._call(self._cancel, keys=[self.task_key(task_id)], args=args))

    def info(self, task_id: str) -> TaskInfo | None:
        if not isinstance(task_id, str) or not task_id:
            return None
        fields = self._call(self.client.hgetall, self.task_key(task_id))
        if not fields:
            return None
        data = {_text(k): _text(v) for k, v in fields.items()}
        payload_text = data.get("payload", "null")
        try:
            payload: object = json.loads(payload_text)
        except ValueError:
            payload = payload_text  # not JSON (written by hand): shown as it is
        return TaskInfo(
            id=task_id,
            task_type=data.get("type", ""),
            payload=payload,
            run_at=_from_ms(data.get("run_at")) or datetime.fromtimestamp(0, UTC),
            status=_status(data.get("status")),
            attempts=int(data.get("attempts") or 0),
            error=data.get("error") or None,
        )

    def retry(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False
        keys = [self.task_key(task_id), self.failed_key]
        return bool(self._call(self._retry, keys=keys, args=[task_id, self.base, self.channel]))

    def failed(self, limit: int = 100) -> list[str]:
        """Ids of failed tasks, most recent first."""
        return [_text(i) for i in self._call(self.client.zrevrange, self.failed_key, 0, max(0, limit - 1))]

    # -- consuming --------------------------------------------------------------------------------

    def consume(
        self,
        task_types: Sequence[str],
        handle: Callable[[Delivery], None],
        stop: threading.Event,
        *,
        visibility_timeout: Callable[[str], timedelta],
        prefetch: int = 10,
    ) -> None:
        consumer = _Consumer(self, consumed_types(task_types), handle, stop, visibility_timeout,
                             max(1, int(prefetch)))
        with self._lock:
            self._consumers.add(consumer.private_channel)
        try:
            consumer.run()
        finally:
            with self._lock:
                self._consumers.discard(consumer.private_channel)

    def wake(self) -> None:
        with self._lock:
            channels = list(self._consumers)
        for channel in channels:
            try:
                self.client.publish(channel, "wake")
            except redis.RedisError as error:  # the waiting worker notices ``stop`` by itself soon anyway
                logger.debug("could not wake %s: %s", channel, error)

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None if CONFIG is not allowed): an ``allkeys-*`` one may evict tasks."""
        return self._call(eviction_policy, self.client)

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<RedisTaskBackend {self._display} prefix={self.prefix!r}>"

    # -- the scripts a delivery runs ------------------------------------------------------------

    def _claim_batch(
        self, types: list[str], limit: int, owner: str, visibility_ms: list[int]
    ) -> tuple[int, int, list[RedisDelivery]]:
        keys = [self.processing_key, *(self.due_key(t) for t in types)]
        args = [self.base, self.channel, limit, owner, *visibility_ms]
        now, next_ms, rows = self._call(self._claim, keys=keys, args=args)
        by_type = dict(zip(types, visibility_ms, strict=True))
        deliveries = []
        for task_id, task_type, payload, attempt, token in rows:
            task_type = _text(task_type)
            deliveries.append(RedisDelivery(
                self, _text(task_id), task_type, _text(payload), int(attempt), str(token), by_type[task_type]
            ))
        return int(now), int(next_ms), deliveries

    def _finish(self, delivery: RedisDelivery, script: Any, keys: list[str], args: list[Any], what: str) -> None:
        if delivery.heartbeat is not None:
            delivery.heartbeat.untrack(delivery)
        if not self._call(script, keys=keys, args=args):
            warn_stale_settle(delivery, what)


@dataclass(eq=False)
class RedisDelivery(Delivery):
    """A claimed task; its ``token`` (the task's claim count) proves the claim is still this worker's."""

    backend: RedisTaskBackend
    id: str
    task_type: str
    payload: str
    attempt: int
    token: str
    visibility_ms: int
    heartbeat: _Heartbeat | None = field(default=None, repr=False)

    @property
    def visibility_seconds(self) -> float:
        return self.visibility_ms / 1000

    def _keys(self) -> list[str]:
        return [self.backend.task_key(self.id), self.backend.processing_key]

    def ack(self) -> None:
        args = [self.id, self.token, _ms(self.backend.retention)]
        self.backend._finish(self, self.backend._ack, self._keys(), args, "ack")

    def retry_later(self, delay: timedelta, error: str) -> None:
        keys = [*self._keys(), self.backend.due_key(self.task_type)]
        args = [self.id, self.token, _ms(delay), _clip(error), self.backend.channel, self.task_type]
        self.backend._finish(self, self.backend._retry_later, keys, args, "schedule a retry of")

    def fail(self, error: str) -> None:
        keys = [*self._keys(), self.backend.failed_key]
        self.backend._finish(self, self.backend._fail, keys, [self.id, self.token, _clip(error)], "fail")

    def release(self) -> None:
        """Give the task back unrun (the worker is stopping): due again at once, this attempt not counted."""
        keys = [*self._keys(), self.backend.due_key(self.task_type)]
        args = [self.id, self.token, self.backend.channel, self.task_type]
        self.backend._finish(self, self.backend._release, keys, args, "release")


class _Heartbeat(ClaimHeartbeat[RedisDelivery]):
    """Extends the claims due for it with one Lua call per round (see :class:`ClaimHeartbeat`)."""

    def __init__(self, backend: RedisTaskBackend) -> None:
        self.backend = backend
        super().__init__()

    def extend(self, batch: list[RedisDelivery]) -> set[RedisDelivery]:
        args: list[Any] = [self.backend.base]
        for delivery in batch:
            args += [delivery.id, delivery.token, delivery.visibility_ms]
        kept = self.backend._call(self.backend._extend, keys=[self.backend.processing_key], args=args)
        return {delivery for delivery, ok in zip(batch, kept, strict=True) if ok}


class _Consumer(ClaimingConsumer):
    """One consume() call: claim, run, and sleep on the wake channel until something may be due."""

    def __init__(
        self,
        backend: RedisTaskBackend,
        types: list[str],
        handle: Callable[[Delivery], None],
        stop: threading.Event,
        visibility_timeout: Callable[[str], timedelta],
        limit: int,
    ) -> None:
        super().__init__(types, handle, stop, visibility_timeout, limit)
        self.backend = backend
        self.private_channel = f"{backend.channel}:{self.token}"

    def run(self) -> None:
        pubsub = self.backend.client.pubsub()
        heartbeat = _Heartbeat(self.backend)
        try:
            # Subscribed (confirmed) before the first claim: no wake-up published after it can be missed.
            self.backend._call(self._subscribe, pubsub)
            self._loop(pubsub, heartbeat)
        finally:
            heartbeat.close()
            with contextlib.suppress(redis.RedisError):
                pubsub.close()

    def _subscribe(self, pubsub: Any) -> None:
        pubsub.subscribe(self.backend.channel, self.private_channel)
        confirmed = 0
        deadline = time.monotonic() + 10
        while confirmed < 2:
            if time.monotonic() > deadline:
                raise redis.TimeoutError("no confirmation of SUBSCRIBE")
            message = pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "subscribe":
                confirmed += 1

    def _loop(self, pubsub: Any, heartbeat: _Heartbeat) -> None:
        while not self.stop.is_set():
            self._drain(pubsub)
            claimed_at = time.monotonic()
            try:
                visibility = [_ms(self.visibility_timeout(t)) for t in self.types]
                now_ms, next_ms, deliveries = self.backend._claim_batch(self.types, self.limit, self.owner, visibility)
            except StoreUnavailable as error:
                self.store_failed(error)
                continue
            self.store_answered()
            answered_at = time.monotonic()
            for delivery in deliveries:
                heartbeat.track(delivery, claimed_at)
            if deliveries:
                run_batch(deliveries, self.handle, self.stop, heartbeat, self.owner)
                continue
            self._sleep(pubsub, now_ms, next_ms, answered_at)

    def _drain(self, pubsub: Any) -> None:
        """Drop the wake-ups already received: the claim about to run sees what they announced.

        (Wake-ups that arrived while handlers ran would otherwise each cost an empty claim.)
        """
        try:
            for _ in range(10_000):
                if pubsub.get_message(timeout=0) is None:
                    return
        except redis.RedisError:
            return  # the claim or the next wait reports it

    def _sleep(self, pubsub: Any, now_ms: int, next_ms: int, answered_at: float) -> None:
        """Wait until ``next_ms`` (server clock; -1: nothing known), a sooner wake-up, wake() or stop."""
        if next_ms < 0:
            deadline = answered_at + self.backend.max_idle.total_seconds()
        else:
            deadline = answered_at + max(0, next_ms - now_ms) / 1000
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                message = pubsub.get_message(timeout=min(remaining, STOP_CHECK_SECONDS))
            except redis.RedisError as error:
                logger.warning("task worker %s: wake-up channel: %s", self.owner, error)
                self.stop.wait(min(max(remaining, 0), 1.0))
                return
            if message is None:
                continue
            if message["type"] == "subscribe":
                return  # re-subscribed after a reconnect: wake-ups may have been lost meanwhile, look now
            if message["type"] != "message":
                continue
            if _text(message["channel"]) == self.private_channel:
                return
            due_text, _, task_type = _text(message["data"]).partition(" ")
            if task_type == "*" or task_type in self.type_set:
                try:
                    due = int(due_text)
                except ValueError:
                    return
                deadline = min(deadline, answered_at + (due - now_ms) / 1000)


def _datetime_ms(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}; pass an aware one")
    return round(value.timestamp() * 1000)


def _clip(error: str) -> str:
    """A handler's traceback, shortened in the middle if it is huge."""
    error = str(error)
    if len(error) <= MAX_ERROR_CHARS:
        return error
    half = MAX_ERROR_CHARS // 2
    return f"{error[:half]}\n[…]\n{error[-half:]}"


def _status(value: str | None) -> TaskStatus:
    try:
        return TaskStatus(value)
    except ValueError:
        return TaskStatus.UNKNOWN
