"""A space is not allowed in a task type: importing this module raises UnknownTaskType."""

from typing import Any

from mutexcron.tasks import task_handler


@task_handler("bad handlers.send sms")
def send(payload: Any) -> None:
    pass
