"""mutexcron's views (``mutexcron_django.urls``): what :mod:`mutexcron.contrib.endpoints` answers, as Django
responses."""

from __future__ import annotations

import logging

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from mutexcron.contrib import endpoints

from .conf import get_settings

logger = logging.getLogger("mutexcron.django")


def http_response(answer: endpoints.Answer) -> HttpResponse:
    """An endpoint's answer as a Django response."""
    return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of the default registry, or of every worker's files in multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR``); 404 while ``MUTEXCRON["METRICS"]`` is off, 503 without the extra or with a
    bad setting (a fixed text: the detail is logged)."""
    try:
        enabled = get_settings().metrics
    except ImproperlyConfigured as error:  # METRICS = True without prometheus-client, or another bad key
        if _has_the_extra():
            return http_response(endpoints.unavailable("metrics", str(error), log=logger))
        return http_response(endpoints.needs_extra(error, log=logger))
    if enabled:
        _watch_pending_tasks()
    return http_response(endpoints.metrics(enabled, request.headers.get("Accept", ""),
                                           how_to_enable="set MUTEXCRON['METRICS'] = True"))


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
