"""Find the jobs: import ``<app>.<module>`` (``cron`` by default) for every installed app, like admin.py.

A bad declaration (invalid cron spec, duplicate name, ...) does not crash start-up: it is kept and
reported by the system checks (mutexcron.E001/E002), which stop ``runserver`` and ``migrate`` with a
clear message naming the app, the module and the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from django.apps import apps
from django.utils.module_loading import module_has_submodule

from mutexcron.errors import MutexcronError


@dataclass(frozen=True)
class DeclarationError:
    module: str
    error: MutexcronError


declaration_errors: list[DeclarationError] = []


def autodiscover(module_names: tuple[str, ...]) -> list[str]:
    """Import every ``<app>.<name>`` that exists; return the modules imported."""
    imported = []
    for app_config in apps.get_app_configs():
        for name in module_names:
            if not module_has_submodule(app_config.module, name):
                continue
            dotted = f"{app_config.name}.{name}"
            try:
                import_module(dotted)
            except MutexcronError as error:
                declaration_errors.append(DeclarationError(dotted, error))
            else:
                imported.append(dotted)
    return imported
