"""Discovered only when MUTEXCRON["TASKS"]["MODULES"] names ``task_handlers``."""

from __future__ import annotations

from typing import Any

from mutexcron.tasks import task_handler


@task_handler("handlerapp.other_module")
def other(payload: Any) -> None:
    pass
