"""Declaring a subcommand of ``manage.py mutexcron``: :func:`subcommand` marks a ``Command`` method as
the handler of one, with its arguments (:func:`argument`); and the argument types the subcommands use."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SubcommandMethod = Callable[..., None]


@dataclass(frozen=True)
class Argument:
    flags: tuple[str, ...]
    options: dict[str, Any]


def argument(*flags: str, **options: Any) -> Argument:
    """One ``add_argument(*flags, **options)`` of a subcommand."""
    return Argument(flags, options)


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    arguments: tuple[Argument, ...]


def subcommand(name: str, help: str, *arguments: Argument) -> Callable[[SubcommandMethod], SubcommandMethod]:
    """Make a ``Command`` method the handler of ``manage.py mutexcron <name>``; it gets the parsed options."""

    def decorate(method: SubcommandMethod) -> SubcommandMethod:
        method.subcommand = Subcommand(name, help, arguments)  # type: ignore[attr-defined]
        return method

    return decorate


def days(text: str) -> float:
    """``--older-than DAYS``: a finite number of days >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of days >= 0")
    return value


def task_types(text: str) -> list[str]:
    """``--types A,B``: task type names, each once, in the order given."""
    types = [name.strip() for name in text.split(",") if name.strip()]
    if not types:
        raise argparse.ArgumentTypeError(f"{text!r} names no task type (give A,B)")
    return list(dict.fromkeys(types))


def prefetch(text: str) -> int:
    """``--prefetch N``: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value
