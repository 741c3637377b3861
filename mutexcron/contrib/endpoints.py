"""What the ``health/`` and ``metrics/`` endpoints answer, without a web framework: the Starlette router and the
Flask blueprint turn an :class:`Answer` into their own response, with the Django views' semantics (503 and a
fixed body when no report can be made, the detail only logged; job names and errors only for callers who may
see them)."""

from __future__ import annotations

import hmac
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ops.checkup import check_health

if TYPE_CHECKING:
    from ..scheduling.scheduler import Scheduler

__all__ = ["NEEDS_EXTRA", "UNAVAILABLE", "Answer", "health", "may_see_details", "metrics", "unavailable"]

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
    try:
        report = check_health(scheduler.store, scheduler.registry, default_zone=scheduler.timezone,
                              misfire_grace_time=scheduler.misfire_grace_time)
    except Exception:  # a store without the control plane, a broken plugin: for the log only
        logger.exception("mutexcron health endpoint: no report")
        return _json(UNAVAILABLE, 503)
    return _json(report.as_json(detail=detail), 200 if report.ok else 503, indent=2 if detail else None)


def unavailable(endpoint: str, reason: str) -> Answer:
    """The fixed answer of ``endpoint`` ("health" or "metrics") when mutexcron is not set up; ``reason`` is
    logged, never shown."""
    logger.error("mutexcron %s endpoint: %s", endpoint, reason)
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
        logger.error("mutexcron metrics endpoint: %s", missing)
        return Answer(503, NEEDS_EXTRA.encode(), TEXT)
    body, content_type = render(accept)
    return Answer(200, body, content_type)
