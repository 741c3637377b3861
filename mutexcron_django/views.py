"""mutexcron's views (``mutexcron_django.urls``)."""

from __future__ import annotations

import logging

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from .conf import get_settings

logger = logging.getLogger("mutexcron.django")

_TEXT = "text/plain; charset=utf-8"
# What an unauthenticated scraper learns of a bad configuration: the detail (setting names, hosts) is logged.
UNAVAILABLE = "mutexcron metrics are unavailable: the configuration has an error (see the server's log)\n"
NEEDS_EXTRA = "mutexcron metrics need prometheus-client: pip install 'mutexcron[prometheus]'\n"


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of the default registry, or of every worker's files in multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR``); 404 while ``MUTEXCRON["METRICS"]`` is off, 503 without the extra or with a
    bad setting (a fixed text: the detail is logged)."""
    try:
        enabled = get_settings().metrics
    except ImproperlyConfigured as error:  # METRICS = True without prometheus-client, or another bad key
        logger.error("mutexcron metrics view: %s", error)
        return HttpResponse(UNAVAILABLE if _has_the_extra() else NEEDS_EXTRA, status=503, content_type=_TEXT)
    if not enabled:
        return HttpResponse("mutexcron metrics are off: set MUTEXCRON['METRICS'] = True\n", status=404,
                            content_type=_TEXT)
    try:
        from mutexcron.telemetry.metrics import render
    except ImportError as missing:
        logger.error("mutexcron metrics view: %s", missing)
        return HttpResponse(NEEDS_EXTRA, status=503, content_type=_TEXT)
    _watch_pending_tasks()
    body, content_type = render(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)


def _has_the_extra() -> bool:
    try:
        import mutexcron.telemetry.metrics  # noqa: F401
    except ImportError:
        return False
    return True


def _watch_pending_tasks() -> None:
    """Build this process's task queue (it connects to nothing) so that ``mutexcron_tasks_pending`` is read from
    the backend at every scrape, in a process that never scheduled a task too: the series never comes and goes
    with whichever worker answers."""
    from .tasks.queue import get_task_queue

    try:
        get_task_queue()
    except ImproperlyConfigured as error:  # a bad TASKS setting: the other series are still served
        logger.error("mutexcron metrics view: no mutexcron_tasks_pending: %s", error)
