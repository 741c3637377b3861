"""The fleet's health from the configured store (:func:`mutexcron.ops.checkup.check_health`), for ``manage.py
mutexcron health``, ``check --deploy`` (mutexcron.W004) and the ``health/`` view: 200 when the store answers
and no job is overdue or failing, 503 otherwise, with the details (job names, errors) only for users who may
view the locks (``mutexcron.view_lock``)."""

from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import suppress

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from mutexcron import default_registry
from mutexcron.contrib import endpoints
from mutexcron.cron import resolve_timezone
from mutexcron.ops.checkup import HealthReport, check_health
from mutexcron.stores import LockStore

from .conf import MutexcronSettings, get_settings
from .views import http_response

__all__ = ["DETAIL_PERMISSION", "health_report", "health_view", "process_store"]

logger = logging.getLogger("mutexcron.django")
DETAIL_PERMISSION = "mutexcron.view_lock"  # who sees job names and errors, as on the admin's Locks page

_lock = threading.Lock()
_cached: tuple[int, str, LockStore] | None = None  # (pid, the STORE setting it was built from, the store)


def health_report() -> HealthReport:
    """One read of the configured store (built for this call: a command's), judged as the app's schedulers
    judge it."""
    conf = get_settings()
    with conf.open_store() as store:
        return check_health(store, default_registry, default_zone=resolve_timezone(conf.timezone))


def process_store(conf: MutexcronSettings) -> LockStore:
    """The store this process reads for ``health/``: its running scheduler's, the settings' LockStore object, or
    one built on first use and kept (a probe every few seconds must not open a connection each time). A forked
    child, or a changed STORE setting, builds its own."""
    global _cached
    from .runtime import running_scheduler  # the history models it imports need the app registry ready

    scheduler = running_scheduler()
    if scheduler is not None:
        return scheduler.store
    if not isinstance(conf.store, str):
        return conf.store
    with _lock:
        if _cached is not None and _cached[:2] == (os.getpid(), conf.store):
            return _cached[2]
        stale, _cached = _cached, None
        if stale is not None and stale[0] == os.getpid():
            with suppress(Exception):
                stale[2].close()
        store = conf.build_store()
        _cached = (os.getpid(), conf.store, store)
        return store


def _may_see_details(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.has_perm(DETAIL_PERMISSION))


@never_cache
@require_safe
def health_view(request: HttpRequest) -> HttpResponse:
    """GET/HEAD: 200 or 503 with the report as JSON; only the status for callers without ``mutexcron.view_lock``;
    503 ``{"status": "unavailable"}`` when no report can be made (the store cannot be built: the detail, which names
    settings and hosts, is only logged)."""
    return http_response(endpoints.health_answer(_process_report, detail=_may_see_details(request), log=logger))


def _process_report() -> HealthReport:
    """One read of this process's store (:func:`process_store`), judged as the app's schedulers judge it."""
    conf = get_settings()
    return check_health(process_store(conf), default_registry, default_zone=resolve_timezone(conf.timezone))


def health_json(report: HealthReport) -> str:
    """The command's ``--json``: the same document as the view gives users who may view the locks."""
    return json.dumps(report.as_json(), indent=2)
