"""The fleet's health from the configured store (:func:`mutexcron.checkup.check_health`), for ``manage.py
mutexcron health``, ``check --deploy`` (mutexcron.W004) and the ``health/`` view: 200 when the store answers
and no job is overdue or failing, 503 otherwise, with the details (job names, errors) for staff only."""

from __future__ import annotations

import json
from contextlib import suppress

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from mutexcron import default_registry
from mutexcron.checkup import HealthReport, check_health
from mutexcron.cron import resolve_timezone

from .conf import get_settings

__all__ = ["health_report", "health_view"]


def health_report() -> HealthReport:
    """One read of the configured store, judged as the app's schedulers judge it."""
    conf = get_settings()
    store = conf.build_store()
    try:
        return check_health(store, default_registry, default_zone=resolve_timezone(conf.timezone))
    finally:
        if isinstance(conf.store, str):  # built here; a LockStore object in settings is shared
            with suppress(Exception):
                store.close()


@never_cache
@require_safe
def health_view(request: HttpRequest) -> HttpResponse:
    """GET/HEAD: 200 or 503 with the report as JSON; anonymous (and non-staff) callers get only the status."""
    report = health_report()
    staff = bool(getattr(request.user, "is_staff", False)) if hasattr(request, "user") else False
    return JsonResponse(report.as_json(detail=staff), status=200 if report.ok else 503,
                        json_dumps_params={"indent": 2} if staff else None)


def health_json(report: HealthReport) -> str:
    """The command's ``--json``: the same document as the view gives staff."""
    return json.dumps(report.as_json(), indent=2)
