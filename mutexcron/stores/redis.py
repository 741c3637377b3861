"""Locks in Redis: one hash per job, each operation a single Lua script (one round trip, atomic).

A deleted lock keeps its hash with ``deleted`` = 1 (a tombstone hidden from readers), so its token,
last fire time, lease, pause and schedule override survive; seeding or acquiring revives it. One server, a Redis
Cluster (each hash is its own slot: ``seed`` and ``locks`` go to every node) or Sentinel (``mutexcron.redis_urls``);
with ``wait_replicas`` an acquire counts only once that many replicas confirmed it (README, "Scaling out").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from redis.commands.core import Script

from .._options import positive_duration
from .._redis import AnyRedis, RedisClient, glob_escape
from .._redis import text as _text
from ..errors import ReplicationUnconfirmed, StoreConfigError, StoreUnavailable
from ..redis_cluster import run_batch, scan_keys, write_then_wait
from ..redis_urls import client_from_url, is_cluster
from ..urls import mask_url
from .base import (
    AcquireRequest,
    AcquireStatus,
    Acquisition,
    LockState,
    LockStore,
    check_incident,
    check_outcome,
    datetime_to_ms,
    duration_ms,
    ms_to_datetime,
)

__all__ = ["RedisLockStore"]

DEFAULT_PREFIX = "mutexcron:lock:"
DEFAULT_WAIT_TIMEOUT = timedelta(milliseconds=200)  # how long an acquire waits for wait_replicas to confirm it

logger = logging.getLogger("mutexcron.stores.redis")

# Every script reads the time with TIME so that leases run on the Redis server's clock, not on the
# clocks of the instances (which may disagree by seconds).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# ARGV[1]: name; after _NOW. Creates a missing hash (created_at = now) or revives a tombstone (with its
# token, fire time, pause, override and created_at); sets ``revived`` to 1 if it did either.
_REVIVE = """
local revived = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'locked', '0', 'locked_by', '', 'last_locked_at', '',
             'last_released_at', '', 'lock_until', '', 'last_fire_time', '', 'token', '0', 'deleted', '0',
             'created_at', now)
  revived = 1
elseif redis.call('HGET', KEYS[1], 'deleted') == '1' then
  redis.call('HSET', KEYS[1], 'deleted', '0')
  revived = 1
end
"""

_SEED = _NOW + _REVIVE + "return revived"

# ARGV: name, owner, lease_ms, fire_ms ('' for a manual run), schedule_version ('' for unchecked).
# Refusals in the contract's order: paused, stale schedule, already ran, busy; a refusal writes nothing.
_ACQUIRE = _NOW + _REVIVE + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'lock_until', 'last_fire_time', 'token', 'locked_by',
                     'paused', 'paused_until', 'schedule_version')
local holder = h[5] or ''
local paused_until = tonumber(h[7])
if h[6] == '1' and (paused_until == nil or paused_until > now) then return {'paused', holder} end
local version = tonumber(h[8]) or 0
if ARGV[4] ~= '' and ARGV[5] ~= '' and tonumber(ARGV[5]) ~= version then
  return {'stale_schedule', tostring(version)}
end
local last_fire = tonumber(h[3])
if ARGV[4] ~= '' and last_fire and last_fire >= tonumber(ARGV[4]) then return {'already_ran', holder} end
if h[1] == '1' and (tonumber(h[2]) or 0) > now then return {'busy', holder} end
local token = (tonumber(h[4]) or 0) + 1
redis.call('HSET', KEYS[1], 'locked', '1', 'locked_by', ARGV[2], 'last_locked_at', now,
           'lock_until', now + tonumber(ARGV[3]), 'token', token)
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'last_fire_time', ARGV[4]) end
return {'acquired', tostring(token)}
"""

# ARGV: token, lease_ms
_RENEW = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'token')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lock_until', now + tonumber(ARGV[2]))
return 1
"""

# ARGV: token, hold_at_least_ms, outcome ('' for none), error ('' for none)
_RELEASE = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'token', 'last_locked_at')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
local hold_until = (tonumber(h[3]) or 0) + tonumber(ARGV[2])
if hold_until > now then
  redis.call('HSET', KEYS[1], 'lock_until', hold_until, 'last_released_at', now)
else
  redis.call('HSET', KEYS[1], 'locked', '0', 'lock_until', now, 'last_released_at', now)
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'last_outcome', ARGV[3], 'last_finished_at', now, 'last_error', ARGV[4])
  if ARGV[3] == 'succeeded' then redis.call('HSET', KEYS[1], 'last_success_at', now) end
end
return 1
"""

_FORCE_UNLOCK = _NOW + """
if redis.call('HGET', KEYS[1], 'locked') ~= '1' then return 0 end
redis.call('HSET', KEYS[1], 'locked', '0', 'lock_until', now, 'last_released_at', now)
return 1
"""

_DELETE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'deleted') == '1' then return 0 end
redis.call('HSET', KEYS[1], 'deleted', '1')
return 1
"""

# The control scripts change a visible hash only, and return it whole (nil if there is none).
_VISIBLE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'deleted') == '1' then return false end
"""
_RETURN_ALL = "\nreturn redis.call('HGETALL', KEYS[1])\n"

# ARGV: until_ms ('' for until resume()), by
_PAUSE = _NOW + _VISIBLE + """
redis.call('HSET', KEYS[1], 'paused', '1', 'paused_at', now, 'paused_until', ARGV[1], 'paused_by', ARGV[2])
""" + _RETURN_ALL

# A pause whose until has passed ended then, not now: ticks after it stay missed (to catch up), not paused.
_RESUME = _NOW + _VISIBLE + """
if redis.call('HGET', KEYS[1], 'paused') == '1' then
  local ended = tonumber(redis.call('HGET', KEYS[1], 'paused_until'))
  if ended == nil or ended > now then ended = now end
  redis.call('HSET', KEYS[1], 'paused', '0', 'paused_at', '', 'paused_until', '', 'paused_by', '', 'resumed_at', ended)
end
""" + _RETURN_ALL

# ARGV: spec, timezone, by ('' for None)
_SET_SCHEDULE = _NOW + _VISIBLE + """
redis.call('HINCRBY', KEYS[1], 'schedule_version', 1)
redis.call('HSET', KEYS[1], 'schedule', ARGV[1], 'schedule_timezone', ARGV[2], 'schedule_by', ARGV[3],
           'schedule_changed_at', now)
""" + _RETURN_ALL

# ARGV: incident. Open it if the visible hash has none; close it if it is the open one.
_OPEN_INCIDENT = _NOW + _VISIBLE + """
local current = redis.call('HGET', KEYS[1], 'incident')
if current and current ~= '' then return 0 end
redis.call('HSET', KEYS[1], 'incident', ARGV[1], 'incident_at', now)
return 1
"""

_CLOSE_INCIDENT = _VISIBLE + """
if redis.call('HGET', KEYS[1], 'incident') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'incident', '', 'incident_at', '')
return 1
"""

P = ParamSpec("P")
T = TypeVar("T")


def _acquire_args(request: AcquireRequest) -> list[str | int]:
    """ARGV of the acquire script: name, owner, lease (ms), fire time (ms, '' for a manual run), version ('')."""
    fire_ms = "" if request.fire_time is None else str(datetime_to_ms(request.fire_time))
    version = "" if request.schedule_version is None else str(request.schedule_version)
    return [request.name, request.owner, duration_ms(request.lease), fire_ms, version]


def _acquisition(status: Any, detail: Any) -> Acquisition:
    """The acquire script's reply {status, token or holder or version} as an Acquisition."""
    status, detail = _text(status), _text(detail)
    if status == "acquired":
        return Acquisition(AcquireStatus.ACQUIRED, token=int(detail))
    if status == "stale_schedule":
        return Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=int(detail))
    return Acquisition(AcquireStatus(status), holder=detail or None)


class RedisLockStore(RedisClient, LockStore):
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
        # One server batches (a pipeline of EVALSHA). redis-py's cluster pipeline sends each script's text (EVAL)
        # and groups the calls in Python: measured slower than the calls one by one in threads, so not there.
        self.batches_acquires = not is_cluster(client)
        self._seed = client.register_script(_SEED)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._force_unlock = client.register_script(_FORCE_UNLOCK)
        self._delete = client.register_script(_DELETE)
        self._pause = client.register_script(_PAUSE)
        self._resume = client.register_script(_RESUME)
        self._set_schedule = client.register_script(_SET_SCHEDULE)
        self._open_incident = client.register_script(_OPEN_INCIDENT)
        self._close_incident = client.register_script(_CLOSE_INCIDENT)

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> RedisLockStore:
        """``redis://[:password@]host[:port][/db][?prefix=…&wait_replicas=N&wait_timeout=<ms>]``; also ``rediss://``,
        ``unix://``, ``redis+cluster://`` and ``redis+sentinel://`` (``mutexcron.redis_urls``)."""
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
        if self.wait_replicas:
            (status, detail), confirmed = self._call(write_then_wait, self.client, self._acquire, [self.key(name)],
                                                     args, self.wait_replicas, duration_ms(self.wait_timeout))
        else:
            (status, detail), confirmed = self._call(self._acquire, keys=[self.key(name)], args=args), 0
        if _text(status) == "acquired" and confirmed < self.wait_replicas:
            self._unconfirmed(name, int(_text(detail)), confirmed)
        return _acquisition(status, detail)

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        """One pipeline of acquire scripts (one per node on a cluster), each atomic on its own. With
        ``wait_replicas``, one by one: each acquire is confirmed by WAIT on its own master."""
        if self.wait_replicas or len(requests) < 2:
            return super().acquire_many(requests)
        calls = [([self.key(request.name)], _acquire_args(request)) for request in requests]
        try:
            replies = self._call(run_batch, self.client, self._acquire, calls)
        except StoreUnavailable as error:  # whether any script ran is unknown: those locks end with their leases
            return [error] * len(requests)
        return [_acquisition(status, detail) for status, detail in replies]

    def _unconfirmed(self, name: str, token: int, confirmed: int) -> None:
        """An acquire that fewer than ``wait_replicas`` replicas confirmed does not count: release it (best effort;
        its lease ends it otherwise) and raise, for the run to be skipped as on any store error."""
        try:
            self.release(name, token=token)
        except StoreUnavailable as error:
            logger.debug("could not release the unconfirmed lock of %r: %s", name, error)
        timeout = duration_ms(self.wait_timeout)
        raise ReplicationUnconfirmed(
            f"{self.kind} {self._display}: the lock of {name!r} reached {confirmed} of {self.wait_replicas} "
            f"replicas within {timeout} ms (wait_replicas): not counted, released"
        )

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return bool(self._call(self._renew, keys=[self.key(name)], args=[token, duration_ms(lease)]))

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        args: list[str | int] = [token, duration_ms(hold_at_least), outcome or "", error or ""]
        return bool(self._call(self._release, keys=[self.key(name)], args=args))

    def force_unlock(self, name: str) -> bool:
        return bool(self._call(self._force_unlock, keys=[self.key(name)]))

    def delete(self, name: str) -> bool:
        return bool(self._call(self._delete, keys=[self.key(name)]))

    def _control(self, script: Script, name: str, args: list[str]) -> LockState | None:
        """Run a control script; its reply is the changed hash as a flat list, or nil."""
        reply = self._call(script, keys=[self.key(name)], args=args)
        return None if reply is None else _state(name, dict(zip(reply[::2], reply[1::2], strict=True)))

    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None) -> LockState | None:
        return self._control(self._pause, name, ["" if until is None else str(datetime_to_ms(until)), by or ""])

    def resume(self, name: str) -> LockState | None:
        return self._control(self._resume, name, [])

    def set_schedule(self, name: str, spec: str | None, *, timezone: str | None = None,
                     by: str | None = None) -> LockState | None:
        return self._control(self._set_schedule, name, [spec or "", timezone or "", by or ""])

    def open_incident(self, name: str, incident: str) -> bool:
        check_incident(incident)
        return bool(self._call(self._open_incident, keys=[self.key(name)], args=[incident]))

    def close_incident(self, name: str, incident: str) -> bool:
        check_incident(incident)
        return bool(self._call(self._close_incident, keys=[self.key(name)], args=[incident]))

    def lock(self, name: str) -> LockState | None:
        return _state(name, self._call(self.client.hgetall, self.key(name)))

    def locks(self) -> list[LockState]:
        def run() -> list[LockState]:
            keys = list(scan_keys(self.client, glob_escape(self.prefix) + "{*}"))
            pipe = self.client.pipeline(transaction=False)  # on a cluster, one per node
            for key in keys:
                pipe.hgetall(key)
            states = []
            for key, fields in zip(keys, pipe.execute(), strict=True):
                name = _text(key)[len(self.prefix) + 1 : -1]
                state = _state(name, fields)
                if state is not None:
                    states.append(state)
            return sorted(states, key=lambda state: state.name)

        return self._call(run)

    def now(self) -> datetime:
        seconds, micros = self._call(self.client.time)
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros)


def _state(name: str, fields: dict[Any, Any]) -> LockState | None:
    data = {_text(k): _text(v) for k, v in fields.items()}
    if not data or data.get("deleted") == "1":
        return None
    return LockState(
        name=name,
        locked=data.get("locked") == "1",
        locked_by=data.get("locked_by") or None,
        last_locked_at=ms_to_datetime(data.get("last_locked_at")),
        last_released_at=ms_to_datetime(data.get("last_released_at")),
        lock_until=ms_to_datetime(data.get("lock_until")),
        last_fire_time=ms_to_datetime(data.get("last_fire_time")),
        token=int(data.get("token") or 0),
        paused=data.get("paused") == "1",
        paused_at=ms_to_datetime(data.get("paused_at")),
        paused_until=ms_to_datetime(data.get("paused_until")),
        paused_by=data.get("paused_by") or None,
        resumed_at=ms_to_datetime(data.get("resumed_at")),
        schedule=data.get("schedule") or None,
        schedule_timezone=data.get("schedule_timezone") or None,
        schedule_version=int(data.get("schedule_version") or 0),
        schedule_by=data.get("schedule_by") or None,
        schedule_changed_at=ms_to_datetime(data.get("schedule_changed_at")),
        created_at=ms_to_datetime(data.get("created_at")),
        last_outcome=data.get("last_outcome") or None,
        last_finished_at=ms_to_datetime(data.get("last_finished_at")),
        last_success_at=ms_to_datetime(data.get("last_success_at")),
        last_error=data.get("last_error") or None,
        incident=data.get("incident") or None,
        incident_at=ms_to_datetime(data.get("incident_at")),
    )
