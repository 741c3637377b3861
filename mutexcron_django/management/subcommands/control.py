"""The run-time control subcommands: ``pause``, ``resume``, ``schedule`` and ``backfill``. Their arguments and actions
are the core's (:data:`mutexcron.cli.CONTROL`, :func:`mutexcron.cli.run_control`), run here on a
never-started scheduler built from the settings, like ``python -m mutexcron`` runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from mutexcron.cli import CONTROL, Failure, UsageError, run_control
from mutexcron.urls import scrub

from ... import runtime
from ...conf import get_settings
from .arguments import SubcommandMethod, argument, subcommand


def declared(action: str) -> Callable[[SubcommandMethod], SubcommandMethod]:
    """:func:`subcommand` for control subcommand ``action``, with the help and arguments the core declares."""
    spec = CONTROL[action]
    return subcommand(action, spec.help, *(argument(*flags, **options) for flags, options in spec.arguments))


def control(command: BaseCommand, action: str, options: dict[str, Any]) -> None:
    """Run ``action`` (pause, resume, schedule, backfill); CommandError with the core's one-line reason (exit 2 for
    bad input, 1 if it could not be done)."""
    store = get_settings().store_spec
    scheduler = runtime.build_scheduler()
    try:
        message = run_control(scheduler, action, options)
    except (UsageError, Failure) as error:
        text = str(error)
        raise CommandError(scrub(text, store) if isinstance(store, str) else text,
                           returncode=2 if isinstance(error, UsageError) else 1) from None
    finally:
        scheduler.shutdown()  # it never started: this closes the store it built
    command.stdout.write(message)
