"""One clock for the SQL stores: the database's "now" and every time written, compared or read back in UTC,
whatever the server's or the session's time zone.

MySQL/MariaDB: Django stores UTC in ``DATETIME`` columns, but ``CURRENT_TIMESTAMP`` is in the session's zone,
so "now" is ``UTC_TIMESTAMP(6)``. PostgreSQL: ``timestamptz`` values and ``STATEMENT_TIMESTAMP()`` are
instants, but Django's psycopg loaders label what the server sends (in the session's zone) as UTC, and
``+ interval '1 day'`` follows daylight saving time in the session's zone: times are read ``AT TIME ZONE
'UTC'`` and durations are added as microseconds. SQLite: Django's ``Now()`` is already UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import DateTimeField, DurationField, Expression, ExpressionWrapper, F, Func, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now

from mutexcron.backend_helpers import as_utc

__all__ = ["AsUTC", "DbNow", "Interval", "aware", "db_now", "now_minus", "now_plus", "now_sql", "plus", "utc_sql"]


class DbNow(Now):
    """Django's ``Now()``, except ``UTC_TIMESTAMP(6)`` on MySQL/MariaDB (whose ``CURRENT_TIMESTAMP`` is local)."""

    def as_mysql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)


class Interval(Expression):
    """``duration`` for datetime arithmetic: exact microseconds on PostgreSQL, where a day part would follow DST."""

    output_field = DurationField()

    def __init__(self, duration: timedelta) -> None:
        super().__init__(output_field=DurationField())
        self.duration = duration

    def as_sql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return compiler.compile(Value(self.duration, output_field=DurationField()))

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return "(INTERVAL '1 microsecond' * %s)", [self.duration // timedelta(microseconds=1)]


class AsUTC(Func):
    """A datetime column read as UTC: ``AT TIME ZONE 'UTC'`` on PostgreSQL (naive, see :func:`aware`), else as is."""

    template = "%(expressions)s"
    output_field = DateTimeField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="(%(expressions)s AT TIME ZONE 'UTC')", **extra_context)


def plus(column: str, duration: timedelta) -> ExpressionWrapper[CombinedExpression]:
    """The datetime ``column`` plus ``duration``, in the database."""
    return ExpressionWrapper(F(column) + Interval(duration), output_field=DateTimeField())


def now_plus(duration: timedelta) -> ExpressionWrapper[CombinedExpression]:
    """The database's now plus ``duration``."""
    return ExpressionWrapper(DbNow() + Interval(duration), output_field=DateTimeField())


def now_minus(duration: timedelta) -> ExpressionWrapper[CombinedExpression]:
    """The database's now minus ``duration``."""
    return ExpressionWrapper(DbNow() - Interval(duration), output_field=DateTimeField())


_NOW_SQL = {
    "postgresql": "(STATEMENT_TIMESTAMP() AT TIME ZONE 'UTC')",
    "mysql": "UTC_TIMESTAMP(6)",
    "sqlite": "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')",
}


def now_sql(vendor: str) -> str:
    """The database's now in UTC as raw SQL, for a query run with parameters (``%`` is doubled)."""
    return _NOW_SQL.get(vendor, "CURRENT_TIMESTAMP")


def utc_sql(vendor: str, sql: str) -> str:
    """Raw SQL of a datetime value, read as UTC (like :class:`AsUTC`)."""
    return f"({sql} AT TIME ZONE 'UTC')" if vendor == "postgresql" else sql


def aware(value: datetime | str | None) -> datetime | None:
    """A time read from the database as an aware UTC datetime: naive values (and SQLite's text) are UTC."""
    if value is None:
        return None
    return as_utc(datetime.fromisoformat(value) if isinstance(value, str) else value)


def db_now(alias: str) -> datetime:
    """The database's now, aware UTC: one query."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + now_sql(connection.vendor), [])
        (raw,) = cursor.fetchone()
    now = aware(raw)
    assert now is not None
    return now
