"""Helpers for authors of lock stores, task backends and task record stores: the policies the built-in ones share.

Public: a client's errors become :class:`~mutexcron.errors.StoreUnavailable` with :func:`store_errors`, stored
tracebacks are cut one way (:func:`clip_error`, :data:`MAX_ERROR_CHARS`), times go to a store as epoch
milliseconds and back (:func:`epoch_ms`, :func:`ms_to_datetime`, :func:`as_utc`), a duration setting is checked
with :func:`positive_duration`, and a worker's stop flag that signal handlers may set is a :class:`SignalFlag`.
The URL helpers are in :mod:`mutexcron.urls`; backends register their schemes with :mod:`mutexcron.plugins`.
"""

from __future__ import annotations

from ._common import (
    MAX_ERROR_CHARS,
    as_utc,
    clip_error,
    duration_ms,
    epoch_ms,
    ms_to_datetime,
    store_errors,
    unavailable,
)
from ._options import positive_duration
from ._signals import SignalFlag

__all__ = [
    "MAX_ERROR_CHARS",
    "SignalFlag",
    "as_utc",
    "clip_error",
    "duration_ms",
    "epoch_ms",
    "ms_to_datetime",
    "positive_duration",
    "store_errors",
    "unavailable",
]
