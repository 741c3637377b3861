"""Locks in Redis: one hash per job, each operation a single Lua script (one round trip, atomic).

A deleted lock keeps its hash with ``deleted`` = 1 (a tombstone hidden from readers), so its token,
last fire time and lease survive; seeding or acquiring revives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

import redis

from .._redis import check_key_prefix, client_from_url, eviction_policy
from ..errors import StoreUnavailable
from ..urls import mask_url
from .base import AcquireStatus, Acquisition, LockState, LockStore, datetime_to_ms, duration_ms, ms_to_datetime

__all__ = ["RedisLockStore"]

DEFAULT_PREFIX = "mutexcron:lock:"

# Every script reads the time with TIME so that leases run on the Redis server's clock, not on the
# clocks of the instances (which may disagree by seconds).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_SEED = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'deleted') ~= '1' then return 0 end
  redis.call('HSET', KEYS[1], 'deleted', '0')
  return 1
end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'locked', '0', 'locked_by', '', 'last_locked_at', '',
           'last_released_at', '', 'lock_until', '', 'last_fire_time', '', 'token', '0', 'deleted', '0')
return 1
"""

# ARGV: name, owner, lease_ms, fire_ms ('' for a manual run)
_ACQUIRE = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'lock_until', 'last_fire_time', 'token', 'locked_by', 'deleted')
if h[6] == '1' then redis.call('HSET', KEYS[1], 'deleted', '0') end
local last_fire = tonumber(h[3])
if ARGV[4] ~= '' and last_fire and last_fire >= tonumber(ARGV[4]) then return {'already_ran', h[5] or ''} end
if h[1] == '1' and (tonumber(h[2]) or 0) > now then return {'busy', h[5] or ''} end
local token = (tonumber(h[4]) or 0) + 1
local fields = {'name', ARGV[1], 'locked', '1', 'locked_by', ARGV[2], 'last_locked_at', now,
                'lock_until', now + tonumber(ARGV[3]), 'token', token, 'deleted', '0'}
if ARGV[4] ~= '' then
  table.insert(fields, 'last_fire_time'); table.insert(fields, ARGV[4])
elseif h[1] == false then
  table.insert(fields, 'last_fire_time'); table.insert(fields, '')
end
if h[1] == false then table.insert(fields, 'last_released_at'); table.insert(fields, '') end
redis.call('HSET', KEYS[1], unpack(fields))
return {'acquired', tostring(token)}
"""

# ARGV: token, lease_ms
_RENEW = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'token')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lock_until', now + tonumber(ARGV[2]))
return 1
"""

# ARGV: token, hold_at_least_ms
_RELEASE = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'token', 'last_locked_at')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
local hold_until = (tonumber(h[3]) or 0) + tonumber(ARGV[2])
if hold_until > now then
  redis.call('HSET', KEYS[1], 'lock_until', hold_until, 'last_released_at', now)
else
  redis.call('HSET', KEYS[1], 'locked', '0', 'lock_until', now, 'last_released_at', now)
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

P = ParamSpec("P")
T = TypeVar("T")


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


class RedisLockStore(LockStore):
    """Lock hashes at ``<prefix>{<job name>}``; the braces make the name the Redis Cluster hash tag."""

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, url: str | None = None) -> None:
        self.client = client
        self.prefix = check_key_prefix(prefix)
        self._display = mask_url(url) if url else repr(client)
        self._seed = client.register_script(_SEED)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._force_unlock = client.register_script(_FORCE_UNLOCK)
        self._delete = client.register_script(_DELETE)

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> RedisLockStore:
        """``redis://[:password@]host[:port][/db][?prefix=…]``; also ``rediss://`` and ``unix://``."""
        client, cleaned, options = client_from_url(url, ("prefix",), **client_options)
        return cls(client, prefix=options.get("prefix", DEFAULT_PREFIX), url=cleaned)

    def key(self, name: str) -> str:
        return f"{self.prefix}{{{name}}}"

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return operation(*args, **kwargs)
        except redis.RedisError as error:
            raise StoreUnavailable(f"Redis store {self._display}: {error}") from error

    def seed(self, names: Iterable[str]) -> int:
        def run() -> int:
            pipe = self.client.pipeline(transaction=False)  # one key per script: Cluster-safe
            for name in dict.fromkeys(names):
                self._seed(keys=[self.key(name)], args=[name], client=pipe)
            return sum(int(created) for created in pipe.execute())

        return self._call(run)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None) -> Acquisition:
        fire_ms = "" if fire_time is None else str(datetime_to_ms(fire_time))
        args: list[str | int] = [name, owner, duration_ms(lease), fire_ms]
        status, detail = self._call(self._acquire, keys=[self.key(name)], args=args)
        status, detail = _text(status), _text(detail)
        if status == "acquired":
            return Acquisition(AcquireStatus.ACQUIRED, token=int(detail))
        return Acquisition(AcquireStatus(status), holder=detail or None)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return bool(self._call(self._renew, keys=[self.key(name)], args=[token, duration_ms(lease)]))

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0)) -> bool:
        return bool(self._call(self._release, keys=[self.key(name)], args=[token, duration_ms(hold_at_least)]))

    def force_unlock(self, name: str) -> bool:
        return bool(self._call(self._force_unlock, keys=[self.key(name)]))

    def delete(self, name: str) -> bool:
        return bool(self._call(self._delete, keys=[self.key(name)]))

    def lock(self, name: str) -> LockState | None:
        return _state(name, self._call(self.client.hgetall, self.key(name)))

    def locks(self) -> list[LockState]:
        def run() -> list[LockState]:
            keys = list(self.client.scan_iter(match=_glob_escape(self.prefix) + "{*}", count=500))
            pipe = self.client.pipeline(transaction=False)
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

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None if CONFIG is not allowed): an ``allkeys-*`` one may evict locks."""
        return self._call(eviction_policy, self.client)

    def now(self) -> datetime:
        seconds, micros = self._call(self.client.time)
        return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros)

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<RedisLockStore {self._display} prefix={self.prefix!r}>"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
    )
