"""Test connections whose session time zone is not UTC, to show that a SQL store's times never depend on it.

``session_time_zone(alias, zone)`` sets the zone on every connection of ``alias`` opened while it is active,
in any thread, through Django's ``connection_created`` signal (sent after Django's own set-up, which sets
PostgreSQL's zone to UTC): a store under test runs unchanged. ``set_session_zone`` changes it on one
open connection (a server whose zone follows daylight saving time, mid-session).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections
from django.db.backends.signals import connection_created

_SET_ZONE = {"mysql": "SET time_zone = %s", "postgresql": "SELECT set_config('TimeZone', %s, false)"}
_READ_ZONE = {"mysql": "SELECT @@session.time_zone", "postgresql": "SELECT current_setting('TimeZone')"}


def set_session_zone(connection: Any, zone: str) -> None:
    """Set the session time zone of ``connection`` (a Django connection to MySQL/MariaDB or PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(_SET_ZONE[connection.vendor], [zone])


def session_zone(connection: Any) -> str:
    """The session time zone that ``connection`` runs in now."""
    with connection.cursor() as cursor:
        cursor.execute(_READ_ZONE[connection.vendor])
        (zone,) = cursor.fetchone()
    return str(zone)


@contextmanager
def session_time_zone(alias: str, zone: str) -> Iterator[None]:
    """Connections of ``alias`` opened in the block (in any thread) run in ``zone``; checked on entry."""
    def on_connect(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias == alias:
            set_session_zone(connection, zone)

    uid = f"session-zone-{uuid.uuid4().hex}"
    connections[alias].close()  # this thread's next use of the alias opens a connection in the zone
    connection_created.connect(on_connect, weak=False, dispatch_uid=uid)
    try:
        assert session_zone(connections[alias]) == zone
        yield
    finally:
        connection_created.disconnect(dispatch_uid=uid)
        connections[alias].close()


class InSessionZone:
    """A contract class mixin: the connections of ``alias`` run in ``session_zone`` (None: Django's own, UTC)."""

    alias: str
    session_zone: str | None = None

    @pytest.fixture(autouse=True)
    def _session_zone(self) -> Iterator[None]:
        if self.session_zone is None:
            yield
            return
        with session_time_zone(self.alias, self.session_zone):
            yield
