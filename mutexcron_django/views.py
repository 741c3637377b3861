"""mutexcron's views (``mutexcron_django.urls``)."""

from __future__ import annotations

import logging

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from .conf import get_settings

logger = logging.getLogger("mutexcron.django")

_TEXT = "text/plain; charset=utf-8"


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of the default registry, or of every worker's files in multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR``); 404 while ``MUTEXCRON["METRICS"]`` is off, 503 without the extra."""
    try:
        enabled = get_settings().metrics
    except ImproperlyConfigured as error:  # METRICS = True without prometheus-client, or another bad key
        logger.error("mutexcron metrics view: %s", error)
        return HttpResponse(f"mutexcron metrics are unavailable: {error}\n", status=503, content_type=_TEXT)
    if not enabled:
        return HttpResponse("mutexcron metrics are off: set MUTEXCRON['METRICS'] = True\n", status=404,
                            content_type=_TEXT)
    try:
        from mutexcron.metrics import render
    except ImportError as missing:
        return HttpResponse(f"mutexcron metrics need prometheus-client: pip install 'mutexcron[prometheus]' "
                            f"({missing})\n", status=503, content_type=_TEXT)
    _watch_pending_tasks()
    body, content_type = render(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)


def _watch_pending_tasks() -> None:
    """Build this process's task queue (it connects to nothing) so that ``mutexcron_tasks_pending`` is read from
    the backend at every scrape, in a process that never scheduled a task too: the series never comes and goes
    with whichever worker answers."""
    from .process_queue import get_task_queue

    try:
        get_task_queue()
    except ImproperlyConfigured as error:  # a bad TASKS setting: the other series are still served
        logger.error("mutexcron metrics view: no mutexcron_tasks_pending: %s", error)
