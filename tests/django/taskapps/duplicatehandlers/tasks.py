"""Two functions, one task type: the second declaration raises JobDefinitionError."""

from typing import Any

from mutexcron.tasks import task_handler


@task_handler("duplicatehandlers.cleanup")
def cleanup(payload: Any) -> None:
    pass


@task_handler("duplicatehandlers.cleanup")
def cleanup_again(payload: Any) -> None:
    pass
