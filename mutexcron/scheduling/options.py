"""The options of a :class:`~mutexcron.Scheduler`, checked once, in one place, into one frozen value.

Every check raises :class:`SchedulerConfigError` naming the option and the value, before the scheduler builds
its store; the fire path then reads the checked values only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from .. import _options
from ..errors import SchedulerConfigError
from ..registry import Registry, check_registry, default_registry

__all__ = ["FireContext", "SchedulerOptions"]

FireContext = Callable[[], AbstractContextManager[Any]]  # entered around each fire in its worker thread


@dataclass(frozen=True)
class SchedulerOptions:
    """A scheduler's options as checked (durations as timedeltas, the zone as a tzinfo, the default registry
    and fire context filled in). Build it with :meth:`checked`."""

    registry: Registry  # the jobs declared in code
    instance_id: str | None  # None: host:pid, read at use (see name())
    timezone: tzinfo
    misfire_grace_time: timedelta
    max_workers: int
    shutdown_timeout: timedelta
    clock_skew: timedelta
    fire_context: FireContext
    busy_grace: timedelta
    sync_interval: timedelta
    ping_timeout: timedelta
    jobs: Registry = field(default_factory=Registry)  # the declared jobs and this scheduler's run-time schedules

    @classmethod
    def checked(cls, given: dict[str, Any]) -> SchedulerOptions:
        """``given`` (Scheduler's keyword arguments but the store and the telemetry flags) checked, in the order
        of Scheduler's signature; :class:`SchedulerConfigError` naming the first bad option and its value."""
        bad = SchedulerConfigError

        def duration(option: str, **bounds: bool) -> timedelta:
            return _options.duration(given[option], what=f"Scheduler {option}", error=bad, **bounds)

        registry = check_registry(given["registry"], what="Scheduler registry", error=bad)
        instance_id = _options.instance_id(given["instance_id"], what="Scheduler instance_id", error=bad)
        timezone = _options.zone(given["timezone"], what="Scheduler timezone", error=bad)
        misfire_grace_time = duration("misfire_grace_time", seconds=False)
        max_workers = _options.count(given["max_workers"], what="Scheduler max_workers", error=bad, maximum=1000)
        shutdown_timeout = duration("shutdown_timeout", seconds=False)
        clock_skew = duration("clock_skew", seconds=False, allow_negative=True)
        fire_context = given["fire_context"]
        if fire_context is not None and not callable(fire_context):
            raise bad(f"Scheduler fire_context must be a context manager factory or None, not {fire_context!r}")
        declared = default_registry if registry is None else registry  # an empty one is falsy
        return cls(
            registry=declared, jobs=Registry(base=declared),
            instance_id=instance_id, timezone=timezone, misfire_grace_time=misfire_grace_time,
            max_workers=max_workers, shutdown_timeout=shutdown_timeout, clock_skew=clock_skew,
            fire_context=fire_context or nullcontext,
            busy_grace=duration("busy_grace", seconds=False),
            sync_interval=duration("sync_interval", seconds=False, allow_zero=False),
            ping_timeout=duration("ping_timeout", allow_zero=False),
        )

    def name(self) -> str:
        """This instance's name in lock documents and run records: ``instance_id``, else ``host:pid`` read now
        (so that a scheduler created before a fork names the child)."""
        return self.instance_id or f"{socket.gethostname()}:{os.getpid()}"

    def now(self) -> datetime:
        """The time on this instance's clock, as skewed by ``clock_skew`` (a testing hook)."""
        return datetime.now(UTC) + self.clock_skew
