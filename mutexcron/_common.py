"""Small helpers every store and backend shares, so that each policy exists once: client errors become
:class:`StoreUnavailable`, stored tracebacks are clipped one way, and times go to the stores as epoch
milliseconds (and back) one way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from .errors import StoreUnavailable
from .urls import scrub

__all__ = ["MAX_ERROR_CHARS", "as_utc", "clip_error", "duration_ms", "epoch_ms", "ms_to_datetime", "store_errors",
           "unavailable"]

# The longest error text (a handler's traceback) any task backend or task record store keeps with a task,
# marker included: of a longer one the head and the tail are kept, since the head says where it started and
# the tail what finally went wrong. One limit everywhere: how a traceback is cut never depends on the backend.
MAX_ERROR_CHARS = 20_000
_CUT = "\n[…]\n"  # stands where the middle of a clipped error was


def unavailable(
    error: BaseException, where: str, *, url: str | None = None, name_error: bool = False, detail: bool = True,
) -> StoreUnavailable:
    """``error`` (a client's) as the StoreUnavailable that :func:`store_errors` raises, for a caller that
    reports an error it did not catch in such a block (a connection found closed)."""
    if not detail:  # the client's settings were not given as a URL: its message cannot be scrubbed
        return StoreUnavailable(f"{where}: {type(error).__name__}")
    message = scrub(str(error), url) if url else str(error)
    if name_error:
        message = f"{type(error).__name__}: {message}"
    return StoreUnavailable(f"{where}: {message}")


@contextmanager
def store_errors(
    errors: type[BaseException] | tuple[type[BaseException], ...], where: str, *, url: str | None = None,
    name_error: bool = False, detail: bool = True,
) -> Iterator[None]:
    """Raise a client error of ``errors`` inside the block as StoreUnavailable naming ``where`` (a store or
    backend as its repr shows it, password masked), so that callers fail closed; with ``url``, that URL's
    secrets are scrubbed from the client's message; with ``name_error``, the message starts with the error's
    class (a database's message alone often does not say what kind of error it is); without ``detail``, the
    class is all it says."""
    try:
        yield
    except errors as error:
        raise unavailable(error, where, url=url, name_error=name_error, detail=detail) from error


def clip_error(error: str | None) -> str:
    """``error`` as every store keeps it: at most :data:`MAX_ERROR_CHARS` characters, a longer one cut in the
    middle (its head and tail kept around a ``[…]`` line); "" for None."""
    if not error:
        return ""
    error = str(error)
    if len(error) <= MAX_ERROR_CHARS:
        return error
    kept = MAX_ERROR_CHARS - len(_CUT)
    head = kept // 2
    return f"{error[:head]}{_CUT}{error[len(error) - (kept - head):]}"


def epoch_ms(value: datetime) -> int:
    """An aware datetime as whole milliseconds since the epoch (how Redis scores and AMQP headers hold it)."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}; pass an aware one")
    return round(value.timestamp() * 1000)


def as_utc(value: datetime) -> datetime:
    """A datetime a database or client gave back as aware UTC: a naive one is taken as UTC (how stores keep times)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def ms_to_datetime(value: int | str | bytes | None) -> datetime | None:
    """Milliseconds since the epoch (as Redis hashes hold them) as an aware UTC datetime; empty values are None."""
    if value is None or value == "" or value == b"":
        return None
    return datetime.fromtimestamp(int(value) / 1000, UTC)


def duration_ms(value: timedelta) -> int:
    """A duration as whole milliseconds, never negative."""
    return max(0, round(value.total_seconds() * 1000))
