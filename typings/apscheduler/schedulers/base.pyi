from collections.abc import Callable, Mapping
from datetime import tzinfo
from typing import Any

from apscheduler.executors.base import BaseExecutor
from apscheduler.job import Job
from apscheduler.triggers.base import BaseTrigger

class BaseScheduler:
    def __init__(
        self,
        gconfig: Mapping[str, Any] = ...,
        *,
        timezone: tzinfo | str | None = ...,
        executors: Mapping[str, BaseExecutor] | None = ...,
        job_defaults: Mapping[str, Any] | None = ...,
        **options: Any,
    ) -> None: ...
    def start(self, paused: bool = False) -> None: ...
    def shutdown(self, wait: bool = True) -> None: ...
    def add_job(
        self,
        func: Callable[..., Any],
        trigger: BaseTrigger | str | None = None,
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        id: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Job: ...
    def reschedule_job(
        self, job_id: str, jobstore: str | None = None, trigger: BaseTrigger | str | None = None, **trigger_args: Any
    ) -> Job: ...
    def remove_job(self, job_id: str, jobstore: str | None = None) -> None: ...
