from collections.abc import Callable
from datetime import datetime
from typing import Any

from apscheduler.triggers.base import BaseTrigger

class Job:
    id: str
    name: str
    func: Callable[..., Any]
    trigger: BaseTrigger
    args: tuple[Any, ...]
    next_run_time: datetime | None
