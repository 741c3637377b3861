"""The targets the admin's run-time schedule tests allow (``callable_target``) in the default registry, for one test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mutexcron import JobContext, callable_target, default_registry

SEND = "reports.send"
PURGE = "purge"
SENT: list[dict[str, Any]] = []


def send_report(to: str, copies: int = 1) -> None:
    """Records what it was called with."""
    SENT.append({"to": to, "copies": copies})


def purge(days: int, ctx: JobContext | None = None) -> None:
    """Takes a JobContext (not a kwarg of the schedule)."""


@pytest.fixture
def targets() -> Iterator[list[str]]:
    """``reports.send`` and ``purge`` allowed in the default registry for this test only."""
    callable_target(SEND)(send_report)
    callable_target(PURGE)(purge)
    SENT.clear()
    yield [SEND, PURGE]
    for name in (SEND, PURGE):
        default_registry._targets.pop(name, None)  # no public way to disallow: tests only
