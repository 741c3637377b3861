"""Shared by every Redis-backed piece (lock store, task backend, task records): URL to client, key prefix,
replies as text, the server's eviction policy, and :class:`RedisClient`, what each of them is built on."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, ClassVar
from urllib.parse import urlsplit

import redis

from ._common import store_errors
from .errors import StoreConfigError
from .urls import check_host_and_port, mask_url, pop_query_options, scrub


def check_key_prefix(prefix: str) -> str:
    """A key prefix without braces: they would change the keys' Redis Cluster hash tag."""
    if "{" in prefix or "}" in prefix:
        raise StoreConfigError(f"Redis key prefix {prefix!r} must not contain braces (they set the hash tag)")
    return prefix


def client_from_url(
    url: str, own_options: tuple[str, ...], **client_options: Any
) -> tuple[redis.Redis, str, dict[str, str]]:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` ``url`` with short default timeouts.

    Returns the client, the URL without mutexcron's ``own_options`` (for display), and their values.
    Malformed URLs raise StoreConfigError without the password (redis-py ignores a bad database number).
    """
    cleaned, options = pop_query_options(url, own_options)
    check_host_and_port(cleaned)
    parts = urlsplit(cleaned)
    database = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and database and not database.isdigit():
        raise StoreConfigError(f"malformed Redis URL {mask_url(url)!r}: database {database!r} is not a number")
    client_options.setdefault("socket_connect_timeout", 2)
    client_options.setdefault("socket_timeout", 5)
    try:
        client = redis.Redis.from_url(cleaned, **client_options)
    except (ValueError, TypeError) as error:
        raise StoreConfigError(f"malformed Redis URL {mask_url(url)!r}: {scrub(str(error), url)}") from None
    return client, cleaned, options


def eviction_policy(client: redis.Redis) -> str | None:
    """The server's ``maxmemory-policy`` (CONFIG GET), or None where CONFIG is not allowed (ACLs, managed Redis).

    Connection errors propagate, for the caller to report as StoreUnavailable."""
    try:
        reply = client.config_get("maxmemory-policy")
    except redis.ResponseError:  # NOPERM, or CONFIG renamed or disabled
        return None
    return reply.get("maxmemory-policy") or None


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
    client: redis.Redis
    prefix: str

    def _bind(self, client: redis.Redis, prefix: str, url: str | None) -> None:
        self.client = client
        self.prefix = check_key_prefix(prefix)
        self._url = url
        self._display = mask_url(url) if url else repr(client)

    def errors(self) -> AbstractContextManager[None]:
        """Redis errors inside the block raised as StoreUnavailable naming this object (the URL's secrets
        scrubbed from the client's message)."""
        return store_errors(redis.RedisError, f"{self.kind} {self._display}", url=self._url)

    def read_hash(self, key: str) -> dict[str, str]:
        """The hash at ``key``, fields and values as text; {} if there is none. Raises as :meth:`errors`."""
        with self.errors():
            fields = self.client.hgetall(key)
        return {text(name): text(value) for name, value in fields.items()}

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._display} prefix={self.prefix!r}>"
