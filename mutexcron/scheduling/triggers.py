"""The triggers the scheduler hands APScheduler: each carries its schedule version (and a test's clock skew), which
the executor (:mod:`mutexcron.scheduling.executor`) passes on with each fire."""

from __future__ import annotations

from datetime import datetime, timedelta

from apscheduler.triggers.base import BaseTrigger

__all__ = ["ShiftedTrigger", "VersionedTrigger"]


class ShiftedTrigger(BaseTrigger):
    """Fires as an instance whose clock is off by ``skew`` would: nominal time t fires at real t - skew."""

    def __init__(self, trigger: BaseTrigger, skew: timedelta) -> None:
        self.trigger, self.skew = trigger, skew

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        previous = previous_fire_time + self.skew if previous_fire_time is not None else None
        fire = self.trigger.get_next_fire_time(previous, now + self.skew)
        return fire - self.skew if fire is not None else None

    def __str__(self) -> str:
        return f"{self.trigger} skewed by {self.skew}"


class VersionedTrigger(BaseTrigger):
    """A trigger tagged with the store's schedule version it was built from: each fire carries it to the
    acquire, which refuses a version the store no longer has (the schedule changed meanwhile)."""

    def __init__(self, trigger: BaseTrigger, version: int) -> None:
        self.trigger, self.version = trigger, version

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        return self.trigger.get_next_fire_time(previous_fire_time, now)

    def __str__(self) -> str:
        return f"{self.trigger} (schedule version {self.version})"
