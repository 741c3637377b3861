"""What the three SQL backends (lock store, task backend, task record store) share about their database: the
``django://[alias]`` URL, the alias check, and one policy for turning database errors into StoreUnavailable."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

from django.db import Error, connections, router
from django.db.models import Model

from mutexcron.backend_helpers import store_errors
from mutexcron.errors import StoreConfigError
from mutexcron.urls import mask_url, pop_query_options, shown

__all__ = ["checked_alias", "drop_broken_connection", "parse_django_url", "sql_errors"]


def checked_alias(using: str | None, model: type[Model], *, url: str | None = None, what: str = "store") -> str:
    """``using`` (default: the router's for writing ``model``) if DATABASES has it; else a StoreConfigError naming
    ``what`` and its ``url`` (masked), or ``django://<alias>`` when the backend was built without a URL."""
    alias = using or router.db_for_write(model)
    if alias not in connections.databases:
        known = ", ".join(sorted(connections.databases))
        named = f"{what} URL {mask_url(url)!r}" if url is not None else mask_url(f"django://{alias}")
        raise StoreConfigError(f"{named}: no database alias {shown(alias)} (DATABASES has {known})")
    return alias


def parse_django_url(url: str, model: type[Model], *, what: str,
                     options: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """The checked alias of a ``django://[alias][?option=…]`` URL (none: the router's for ``model``) and its
    ``options``; a path, a fragment or another option is a StoreConfigError naming ``what`` URL, masked."""
    cleaned, values = pop_query_options(url, options)
    parts = urlsplit(cleaned)
    if parts.query or parts.fragment or parts.path.strip("/"):
        usage = "django://[alias]" + (f"[?{'&'.join(f'{name}=…' for name in options)}]" if options else "")
        raise StoreConfigError(f"malformed {what} URL {mask_url(url)!r}: use {usage}")
    return checked_alias(unquote(parts.netloc) or None, model, url=url, what=what), values


def drop_broken_connection(alias: str) -> None:
    """After an error, close this thread's connection of ``alias`` if it is unusable (or past CONN_MAX_AGE),
    so that the next call opens a new one; never inside the caller's transaction."""
    # Django does that only around requests (close_old_connections). Threads no request cycle cleans up (the
    # scheduler's heartbeat and schedule-sync threads, a producer thread, a broker's consumer) would keep a
    # connection the server terminated (pg_terminate_backend) for good: every lock renewal would fail with
    # "the connection is closed" and the lease run out under the running body (tests/chaos/test_postgres_terminate).
    connection = connections[alias]
    if not connection.in_atomic_block:
        with contextlib.suppress(Exception):  # closing a dead connection may fail too: it is dropped all the same
            connection.close_if_unusable_or_obsolete()


@contextlib.contextmanager
def sql_errors(alias: str, where: str) -> Iterator[None]:
    """A database error inside the block as StoreUnavailable naming ``where`` and the error's class, so that
    callers fail closed; first, this thread's connection is dropped if the error left it unusable."""
    with store_errors(Error, where, name_error=True):
        try:
            yield
        except Error:
            drop_broken_connection(alias)
            raise
