"""Shared by every Redis-backed piece (lock store, task backend, cancel marks): URL to client, key prefix,
the server's eviction policy."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis

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
