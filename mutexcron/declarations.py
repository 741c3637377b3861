"""Bad ``@mutex_cron`` declarations kept instead of raised while modules are imported in collecting mode (Django's
discovery of ``cron.py``): the module's later jobs are still declared, the checks report it and a starting scheduler
logs each job that will not run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import CronSpecError, JobDefinitionError

__all__ = ["DeclarationProblem", "collecting", "keep", "location"]


@dataclass(frozen=True)
class DeclarationProblem:
    """A job whose declaration failed: its name as declared (or ``module.qualname``), where, and why."""

    job: str
    location: str  # module.qualname (file:line) of the decorated function
    error: CronSpecError | JobDefinitionError

    def __str__(self) -> str:
        return f"job {self.job!r} ({self.location}) will not run: {self.error}"


_active = threading.local()  # this thread's lists of kept problems, innermost last


@contextmanager
def collecting() -> Iterator[list[DeclarationProblem]]:
    """Within: a bad ``@mutex_cron`` in this thread is kept (in its registry and the list yielded) instead of
    raising, so that one bad declaration does not stop its module's later ones."""
    stack: list[list[DeclarationProblem]] = getattr(_active, "stack", [])
    _active.stack = stack
    found: list[DeclarationProblem] = []
    stack.append(found)
    try:
        yield found
    finally:
        stack.pop()  # this one: the with blocks nest


def keep(problem: DeclarationProblem) -> bool:
    """Add ``problem`` to every list collecting in this thread; False when none is (the caller raises)."""
    stack: list[list[DeclarationProblem]] = getattr(_active, "stack", [])
    for found in stack:
        found.append(problem)
    return bool(stack)


def location(func: object) -> str:
    """Where a function was written: ``module.qualname (file:line)`` (a django.tasks Task: its function's)."""
    inner = getattr(func, "func", func) if callable(getattr(func, "enqueue", None)) else func
    code = getattr(inner, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}{where}"
