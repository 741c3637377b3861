"""The Locks page and its run-now and force-unlock actions: every declared job and every lock in the store,
read live at each request (rows from :mod:`.lock_rows`). Both actions are POSTs, outside the request's
transaction; pause, resume and schedule changes are in :mod:`.control_views`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone as dj_timezone

from mutexcron import Outcome, RunRecord, default_registry
from mutexcron.cron import resolve_timezone
from mutexcron.errors import MutexcronError
from mutexcron.registry import validate_job_name
from mutexcron.stores import LockState, LockStore, require_control

from ..conf import MutexcronSettings, get_settings
from ..models import Lock
from .control_views import LockControlAdmin, named_post, outside_request_transaction
from .display import (
    current_settings,
    format_duration,
    last_line,
    show_time,
    without_store_secrets,
    zone_name,
)
from .lock_rows import build_rows, open_store, read_store, run_job_now
from .schedules import paused_line
from .timeline import build_timelines

FORCE_UNLOCK_PERMISSION = "force_unlock_lock"  # declared in Lock.Meta.permissions

NamedView = Callable[["LockAdmin", HttpRequest, str], HttpResponse]


@admin.register(Lock)
class LockAdmin(LockControlAdmin):
    """The Locks page: every declared job and every lock in the store, read live at each request."""

    change_list_template = "admin/mutexcron/lock/change_list.html"
    force_unlock_template = "admin/mutexcron/lock/force_unlock_confirmation.html"
    timeline_template = "admin/mutexcron/lock/timeline.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # lock documents are created by the schedulers

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # rows of the SQL store only; orphans are deleted with ``manage.py mutexcron unlock --delete``

    def has_force_unlock_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{FORCE_UNLOCK_PERMISSION}")

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        site = self.admin_site
        return [
            path("run/", site.admin_view(outside_request_transaction(self.run_now_view)),
                 name="{}_{}_run".format(*info)),
            path("force-unlock/", site.admin_view(outside_request_transaction(self.force_unlock_view)),
                 name="{}_{}_force_unlock".format(*info)),
            *self.control_urls(),
            path("<path:object_id>/timeline/", site.admin_view(self.timeline_view),
                 name="{}_{}_timeline".format(*info)),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        now = dj_timezone.now()
        listing = read_store(now)
        rows = build_rows(listing, now)
        history_url = ""
        if request.user.has_perm(f"{self.opts.app_label}.view_jobrun") or request.user.has_perm(
            f"{self.opts.app_label}.change_jobrun"
        ):
            history_url = reverse("admin:mutexcron_jobrun_changelist", current_app=self.admin_site.name)
        can_see_schedules = any(request.user.has_perm(f"{self.opts.app_label}.{action}_schedule")
                                for action in ("view", "add", "change"))
        context = {
            **self._page_context(request, "Job locks"),
            "rows": rows,
            "declared_count": sum(1 for row in rows if not row.orphan and not row.runtime),
            "runtime_count": sum(1 for row in rows if row.runtime),
            "orphan_count": sum(1 for row in rows if row.orphan and not row.runtime),
            "store": {"description": listing.store, "error": listing.error},
            "scheduler_timezone": zone_name(listing.timezone),
            "store_time": "" if listing.error else show_time(listing.now),
            "can_run": self.has_change_permission(request),
            "can_force_unlock": self.has_force_unlock_permission(request),
            "run_url": reverse("admin:mutexcron_lock_run", current_app=self.admin_site.name),
            "force_unlock_url": reverse("admin:mutexcron_lock_force_unlock", current_app=self.admin_site.name),
            "history_url": history_url,
            "can_see_schedules": can_see_schedules,
            "schedules_url": reverse("admin:mutexcron_schedule_changelist", current_app=self.admin_site.name)
            if can_see_schedules else "",
            **self.control_context(request),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def history_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
                     ) -> HttpResponse:
        """The job's page (:class:`LockControlAdmin`), linking to its timeline."""
        timeline_url = reverse("admin:mutexcron_lock_timeline", args=[object_id], current_app=self.admin_site.name)
        return super().history_view(request, object_id, {"timeline_url": timeline_url, **(extra_context or {})})

    def timeline_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A job's last ticks (24 hours, at most 200) as a strip of cells, its run durations, and as a table."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        name = unquote(object_id)
        try:
            state, now, schedule = self._read(validate_job_name(name))
            zone = resolve_timezone(get_settings().timezone)
        except (ImproperlyConfigured, MutexcronError) as error:
            return self._fail(request, f"read “{name}”", error)
        job = self._job(name, state)
        if schedule is None or job is None:
            return self._fail(request, f"show the timeline of “{name}”",
                              ValueError("no job of that name is declared in this process"))
        timeline = build_timelines([(job, state, schedule.trigger)], now=now, zone=zone).get(name)
        history_url = ""
        if request.user.has_perm(f"{self.opts.app_label}.view_jobrun"):
            history_url = reverse("admin:mutexcron_jobrun_changelist", current_app=self.admin_site.name) + \
                "?" + urlencode({"job_name__exact": name})
        return self._render(
            request, self.timeline_template, f"Timeline of {name}", name=name, state=state, schedule=schedule,
            timeline=timeline, job_url=self.job_url(name), history_url=history_url,
            paused_line=paused_line(state, now), strip=timeline.strip() if timeline else "",
            sparkline=timeline.sparkline() if timeline else "", cells=timeline.table() if timeline else [],
            since=show_time(timeline.since, schedule.zone) if timeline and timeline.since else "")

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
                    ) -> HttpResponse:
        # A row of the SQL table is not the truth for Redis or MongoDB stores: the Locks page is.
        return redirect(self._changelist_url())

    @named_post("job", permission="has_change_permission")
    def run_now_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: run the job (declared, or a run-time schedule) now under its lock and report the outcome
        as a message."""
        try:
            job = default_registry.get(name) if name in default_registry else self._job(name, self._read(name)[0])
            if job is None:
                self.message_user(request, f"Job “{name}” is not declared in this process; it cannot be run.",
                                  messages.ERROR)
                return redirect(self._changelist_url())
            record = run_job_now(job)
        except (ImproperlyConfigured, MutexcronError) as error:
            reason = without_store_secrets(str(error), current_settings())
            self.message_user(request, f"Job “{name}” was not run: {reason}", messages.ERROR)
            return redirect(self._changelist_url())
        self._report_run(request, record)
        self.log_change(request, Lock(name=name), f"Ran now: {record.outcome}")
        return redirect(self._changelist_url())

    def _report_run(self, request: HttpRequest, record: RunRecord) -> None:
        name, took = record.job_name, ""
        if record.finished_at is not None:
            took = format_duration(record.finished_at - record.started_at)
        outcome = record.outcome
        if outcome is Outcome.SUCCEEDED:
            self.message_user(request, f"Job “{name}” ran on {record.instance_id} and succeeded in {took}.",
                              messages.SUCCESS)
        elif outcome in (Outcome.FAILED, Outcome.TIMED_OUT):
            verb = "timed out" if outcome is Outcome.TIMED_OUT else "failed"
            self.message_user(
                request,
                f"Job “{name}” ran on {record.instance_id} and {verb} after {took}: {last_line(record.error)} "
                "(the traceback is in the run history).",
                messages.ERROR,
            )
        elif outcome is Outcome.ENQUEUED:
            self.message_user(request, f"Job “{name}” was enqueued by {record.instance_id} as task {record.task_id}: "
                              "a task worker runs it (its outcome is in the run history).", messages.SUCCESS)
        elif outcome is Outcome.SKIPPED_BUSY:
            self.message_user(request, f"Job “{name}” did not run: {record.error or 'its lock is busy'}.",
                              messages.WARNING)
        elif outcome is Outcome.SKIPPED_STORE_ERROR:
            reason = without_store_secrets(record.error or "", current_settings())
            self.message_user(request, f"Job “{name}” did not run: the lock store cannot be reached: {reason}",
                              messages.ERROR)
        else:
            self.message_user(request, f"Job “{name}” did not run: {outcome} {record.error or ''}".strip(),
                              messages.WARNING)
        if record.lock_lost:
            self.message_user(request, f"Job “{name}” lost its lock while it ran (its lease ran out or it was "
                              "force-unlocked).", messages.WARNING)

    @named_post("lock", permission="has_force_unlock_permission")
    def force_unlock_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: a confirmation page; POST ``name`` and ``confirm=yes``: free the lock."""
        conf: MutexcronSettings | None = None
        state: LockState | None = None
        try:
            with open_store() as (conf, store):
                controls = require_control(store, f"force-unlock {name!r}")
                state = controls.lock(name)
                if request.POST.get("confirm") != "yes":
                    return self._force_unlock_confirmation(request, name, state, store, conf)
                unlocked = controls.force_unlock(name)
        except (ImproperlyConfigured, MutexcronError) as error:
            self.message_user(request, f"Could not force-unlock “{name}”: {without_store_secrets(str(error), conf)}",
                              messages.ERROR)
            return redirect(self._changelist_url())
        if unlocked:
            holder = state.locked_by if state is not None and state.locked_by else "another instance"
            self.message_user(request, f"Force-unlocked “{name}” (it was held by {holder}).", messages.SUCCESS)
            self.log_change(request, Lock(name=name), f"Force-unlocked (was held by {holder})")
        else:
            self.message_user(request, f"“{name}” was not locked; nothing changed.", messages.WARNING)
        return redirect(self._changelist_url())

    def _force_unlock_confirmation(self, request: HttpRequest, name: str, state: LockState | None, store: LockStore,
                                   conf: MutexcronSettings) -> HttpResponse:
        held = False
        if state is not None:
            try:
                held = state.is_held(store.now())
            except MutexcronError:
                held = state.locked
        context = {
            **self._page_context(request, "Are you sure?"),
            "name": name,
            "state": state,
            "held": held,
            "declared": name in default_registry,
            "lock_until": show_time(state.lock_until) if state else "",
            "store_description": without_store_secrets(repr(store), conf),
            "changelist_url": self._changelist_url(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.force_unlock_template, context)
