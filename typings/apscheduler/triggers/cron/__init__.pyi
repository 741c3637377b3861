from datetime import datetime, tzinfo

from apscheduler.triggers.base import BaseTrigger

_Field = int | str | None

class CronTrigger(BaseTrigger):
    def __init__(
        self,
        year: _Field = None,
        month: _Field = None,
        day: _Field = None,
        week: _Field = None,
        day_of_week: _Field = None,
        hour: _Field = None,
        minute: _Field = None,
        second: _Field = None,
        start_date: datetime | str | None = None,
        end_date: datetime | str | None = None,
        timezone: tzinfo | str | None = None,
        jitter: int | None = None,
    ) -> None: ...
    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None: ...
