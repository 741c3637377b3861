"""Find the jobs and task handlers: import ``<app>.<module>`` for every installed app, like admin.py.

- Jobs: the modules in ``MUTEXCRON["MODULES"]`` (``cron`` by default) declare ``@mutex_cron`` jobs.
- Task handlers: the modules in ``MUTEXCRON["TASKS"]["MODULES"]`` (``tasks`` by default) declare
  ``@task_handler`` handlers. ``tasks`` is also the conventional name of Celery's and ``django.tasks``'
  modules: those are imported too (which is what their own start-up does sooner or later); set
  ``TASKS["MODULES"]`` to another name (``["task_handlers"]``) to import only modules of your own.

A module named in both lists is imported once. A bad declaration (invalid cron spec, duplicate job
name, invalid task type or handler options, two handlers for one type) does not crash start-up: it is
kept and reported by the system checks (mutexcron.E001/E002 for jobs, E003 for task handlers), which
stop ``runserver``, ``migrate`` and ``mutexcron worker`` with a message naming the app, the module and
the declaration. A bad ``@mutex_cron`` is kept without stopping its module (``mutexcron.declarations``):
the jobs declared after it are still declared, and a starting scheduler logs an ERROR for it. Any other
exception raised by a module propagates, as it does for admin.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.apps import apps
from django.core.checks import Error, register
from django.utils.module_loading import module_has_submodule

from mutexcron.declarations import collecting
from mutexcron.errors import MutexcronError
from mutexcron.tasks import TaskError
from mutexcron.tasks.handlers import DuplicateTaskHandler


@dataclass(frozen=True)
class DeclarationError:
    module: str
    error: MutexcronError


declaration_errors: list[DeclarationError] = []  # @mutex_cron: mutexcron.E001 / E002 (checks.py)
handler_errors: list[DeclarationError] = []  # @task_handler: mutexcron.E003 (below)


def is_handler_error(error: MutexcronError) -> bool:
    """Whether a declaration error comes from ``@task_handler`` (task type, handler options, duplicate type):
    those are all TaskErrors (InvalidTaskType, TaskHandlerError, DuplicateTaskHandler)."""
    return isinstance(error, TaskError)


def _keep(problem: DeclarationError) -> None:
    found = handler_errors if is_handler_error(problem.error) else declaration_errors
    if not any(seen.module == problem.module and str(seen.error) == str(problem.error) for seen in found):
        found.append(problem)  # the apps' ready() may run again (override_settings): report it once


def autodiscover(module_names: tuple[str, ...], handler_module_names: tuple[str, ...] = ()) -> list[str]:
    """Import every ``<app>.<name>`` that exists, for the jobs' and the handlers' module names (each module
    once); return the modules imported. A declaration error is kept for the checks, by its kind."""
    imported = []
    names = list(dict.fromkeys([*module_names, *handler_module_names]))
    for app_config in apps.get_app_configs():
        for name in names:
            if not module_has_submodule(app_config.module, name):
                continue
            dotted = f"{app_config.name}.{name}"
            with collecting() as bad_jobs:  # a bad @mutex_cron is kept (and the module goes on)
                try:
                    import_module(dotted)
                except MutexcronError as error:
                    _keep(DeclarationError(dotted, error))
                else:
                    imported.append(dotted)
            for problem in bad_jobs:
                _keep(DeclarationError(dotted, problem.error))
    return imported


def declaration_messages(problems: list[DeclarationError], duplicate: type[MutexcronError],
                         ids: tuple[str, str], hints: tuple[str, str]) -> list[Error]:
    """One check error per kept problem; ``ids`` and ``hints`` are (for a ``duplicate``, for any other)."""
    return [
        Error(f"{problem.module}: {problem.error}", obj=problem.module,
              id=ids[0] if isinstance(problem.error, duplicate) else ids[1],
              hint=hints[0] if isinstance(problem.error, duplicate) else hints[1])
        for problem in problems
    ]


@register("mutexcron")
def check_handler_declarations(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """mutexcron.E003: a task handler module raised while declaring its handlers."""
    return declaration_messages(
        handler_errors, DuplicateTaskHandler, ("mutexcron.E003", "mutexcron.E003"),
        ("Give one of the functions another task type; a type has exactly one handler.",
         "Fix the @task_handler declaration; tasks of the module's types are not run until then."))
