from datetime import datetime, tzinfo

from apscheduler.triggers.base import BaseTrigger

class DateTrigger(BaseTrigger):
    def __init__(self, run_date: datetime | str | None = None, timezone: tzinfo | str | None = None) -> None: ...
    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None: ...
