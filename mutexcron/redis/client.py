"""Shared by every Redis-backed piece (lock store, task backend, task records): URL to client (:mod:`.urls`), key
prefix, replies as text, the server's eviction policy, and :class:`RedisClient`, what each of them is built on."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import ClassVar

import redis
from redis.cluster import RedisCluster

from .._common import store_errors, unavailable
from ..errors import StoreConfigError, StoreUnavailable
from ..urls import mask_url
from .urls import REDIS_ERRORS, AnyRedis, client_from_url, close_client

__all__ = ["AnyRedis", "RedisClient", "check_key_prefix", "client_from_url", "eviction_policy", "glob_escape",
           "text"]


def check_key_prefix(prefix: str) -> str:
    """A key prefix without braces: they would change the keys' Redis Cluster hash tag."""
    if "{" in prefix or "}" in prefix:
        raise StoreConfigError(f"Redis key prefix {prefix!r} must not contain braces (they set the hash tag)")
    return prefix


def eviction_policy(client: AnyRedis) -> str | None:
    """The server's ``maxmemory-policy`` (CONFIG GET), or None where CONFIG is not allowed (ACLs, managed Redis).
    On a cluster, every master's: the first that is not ``noeviction``, if any.

    Connection errors propagate, for the caller to report as StoreUnavailable."""
    try:
        if isinstance(client, RedisCluster):
            replies: dict[str, dict[str, str]] = client.config_get("maxmemory-policy",  # type: ignore[assignment]
                                                                   target_nodes=RedisCluster.PRIMARIES)
            policies = [reply.get("maxmemory-policy") for reply in replies.values()]
            return next((p for p in policies if p and p != "noeviction"), policies[0] if policies else None)
        reply = client.config_get("maxmemory-policy")
    except redis.ResponseError:  # NOPERM, or CONFIG renamed or disabled
        return None
    return reply.get("maxmemory-policy") or None


def glob_escape(text: str) -> str:
    """``text`` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def text(value: bytes | str | None) -> str:
    """A reply of redis-py (bytes, unless the client decodes them) as str; "" for None."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


class RedisClient:
    """What a Redis-backed store or backend is built on: its client and key prefix, its URL (password masked)
    in errors and in its repr, and close(). A class sets ``kind``, how its errors name it, and calls
    :meth:`_bind` first thing in ``__init__``."""

    kind: ClassVar[str]
    client: AnyRedis
    prefix: str

    def _bind(self, client: AnyRedis, prefix: str, url: str | None) -> None:
        self.client = client
        self.prefix = check_key_prefix(prefix)
        self._url = url
        self._display = mask_url(url) if url else repr(client)

    def errors(self) -> AbstractContextManager[None]:
        """Redis errors inside the block raised as StoreUnavailable naming this object (the URL's secrets
        scrubbed from the client's message)."""
        return store_errors(REDIS_ERRORS, f"{self.kind} {self._display}", url=self._url)

    def unavailable(self, error: BaseException) -> StoreUnavailable:
        """A Redis error that a reply carried instead of raising (a pipeline's, with ``raise_on_error=False``) as
        the StoreUnavailable :meth:`errors` would raise for it."""
        return unavailable(error, f"{self.kind} {self._display}", url=self._url)

    def read_hash(self, key: str) -> dict[str, str]:
        """The hash at ``key``, fields and values as text; {} if there is none. Raises as :meth:`errors`."""
        with self.errors():
            fields = self.client.hgetall(key)
        return {text(name): text(value) for name, value in fields.items()}

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None where CONFIG is not allowed), for every Redis-backed piece: an
        ``allkeys-*`` one may evict keys without a TTL (locks, tasks, records). Raises as :meth:`errors`."""
        with self.errors():
            return eviction_policy(self.client)

    def close(self) -> None:
        close_client(self.client)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._display} prefix={self.prefix!r}>"
