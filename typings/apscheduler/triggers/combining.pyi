from abc import ABCMeta
from datetime import datetime

from apscheduler.triggers.base import BaseTrigger

class BaseCombiningTrigger(BaseTrigger, metaclass=ABCMeta):
    triggers: list[BaseTrigger]
    jitter: int | None
    def __init__(self, triggers: list[BaseTrigger], jitter: int | None = None) -> None: ...

class AndTrigger(BaseCombiningTrigger):
    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None: ...

class OrTrigger(BaseCombiningTrigger):
    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None: ...
