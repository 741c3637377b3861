"""What the ``health/`` and ``metrics/`` endpoints answer, without a web framework: the Django views, the Starlette
router and the Flask blueprint turn an :class:`Answer` into their own response (503 and a fixed body when no report
can be made, the detail only logged; job names and errors only for callers who may see them)."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ops.checkup import HealthReport, check_health

if TYPE_CHECKING:
    from ..scheduling.scheduler import Scheduler

__all__ = ["NEEDS_EXTRA", "UNAVAILABLE", "Answer", "health", "health_answer", "may_see_details", "metrics",
           "needs_extra", "unavailable"]

logger = logging.getLogger("mutexcron.contrib")

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
UNAVAILABLE = {"status": "unavailable"}  # health/ when no report can be made
# What an anonymous scraper learns of a bad configuration: the detail (setting names, hosts) is logged.
METRICS_UNAVAILABLE = "mutexcron metrics are unavailable: the configuration has an error (see the server's log)\n"
NEEDS_EXTRA = "mutexcron metrics need prometheus-client: pip install 'mutexcron[prometheus]'\n"


@dataclass(frozen=True)
class Answer:
    """An endpoint's response: status, body and content type."""

    status: int
    body: bytes
    content_type: str


def _json(document: dict[str, Any], status: int, *, indent: int | None = None) -> Answer:
    return Answer(status, json.dumps(document, indent=indent).encode(), JSON)


def may_see_details(authorization: str | None, token: str | None) -> bool:
    """Whether a caller sees job names and errors: only with ``Authorization: Bearer <token>`` matching the
    configured token (compared in constant time); never when no token is configured."""
    if not token or not authorization:
        return False
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def health(scheduler: Scheduler, *, detail: bool) -> Answer:
    """200 or 503 with the fleet's health read from ``scheduler``'s store (only the status without ``detail``);
    503 ``{"status": "unavailable"}`` when no report can be made (the reason is logged)."""
    return health_answer(lambda: check_health(scheduler.store, scheduler.registry, default_zone=scheduler.timezone,
                                              misfire_grace_time=scheduler.misfire_grace_time), detail=detail)


def health_answer(report: Callable[[], HealthReport], *, detail: bool, log: logging.Logger = logger) -> Answer:
    """200 or 503 with the health ``report()`` makes (only the status without ``detail``); 503
    ``{"status": "unavailable"}`` when it raises (the reason is logged on ``log``)."""
    try:
        made = report()
    except Exception:  # a store without the control plane, a broken plugin, a bad setting: for the log only
        log.exception("mutexcron health endpoint: no report")
        return _json(UNAVAILABLE, 503)
    return _json(made.as_json(detail=detail), 200 if made.ok else 503, indent=2 if detail else None)


def unavailable(endpoint: str, reason: str, *, log: logging.Logger = logger) -> Answer:
    """The fixed answer of ``endpoint`` ("health" or "metrics") when mutexcron is not set up; ``reason`` is
    logged (on ``log``), never shown."""
    log.error("mutexcron %s endpoint: %s", endpoint, reason)
    if endpoint == "health":
        return _json(UNAVAILABLE, 503)
    return Answer(503, METRICS_UNAVAILABLE.encode(), TEXT)


def metrics(enabled: bool, accept: str, *, how_to_enable: str) -> Answer:
    """The Prometheus exposition (every worker's files in multiprocess mode) in the format ``accept`` asks for;
    404 while metrics are off (``how_to_enable`` says how to turn them on), 503 without prometheus-client."""
    if not enabled:
        return Answer(404, f"mutexcron metrics are off: {how_to_enable}\n".encode(), TEXT)
    try:
        from ..telemetry.metrics import render
    except ImportError as missing:
        return needs_extra(missing)
    body, content_type = render(accept)
    return Answer(200, body, content_type)


def needs_extra(reason: object, *, log: logging.Logger = logger) -> Answer:
    """503 with the fixed text that says to install prometheus-client; ``reason`` is logged (on ``log``)."""
    log.error("mutexcron metrics endpoint: %s", reason)
    return Answer(503, NEEDS_EXTRA.encode(), TEXT)
