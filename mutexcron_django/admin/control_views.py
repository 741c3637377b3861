"""The Locks page's control actions: pause, resume, change and reset a schedule, backfill, and bulk pause and resume.
Each is a POST that shows a confirmation page (or form) first, writes through the configured store with
``by=<username>``, and records a LogEntry shown on the job's page (its admin history)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone as dj_timezone

from mutexcron import Job, default_registry
from mutexcron.cron import resolve_timezone
from mutexcron.definitions import with_stored
from mutexcron.errors import JobDefinitionError, MutexcronError
from mutexcron.ops import control
from mutexcron.ops.listing import job_line
from mutexcron.registry import validate_job_name
from mutexcron.scheduling.backfill import effective_trigger
from mutexcron.stores import LockState, require_control

from ..conf import get_settings
from ..models import Lock, Schedule
from .backfill import BackfillForm, start_backfill
from .display import show_time
from .forms import PauseForm, ScheduleForm
from .lock_rows import open_store
from .pages import LivePageAdmin
from .schedules import JobSchedule, job_schedule, paused_line

PAUSE_PERMISSION = "pause_lock"  # declared in Lock.Meta.permissions
RETIME_PERMISSION = "retime_lock"  # likewise; not the Schedule proxy's change_schedule (run-time schedules)
BULK_ACTIONS = {"pause_selected": "Pause selected jobs", "resume_selected": "Resume selected jobs"}

NamedView = Callable[[Any, HttpRequest, str], HttpResponse]


def outside_request_transaction(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Exempt ``view`` from ATOMIC_REQUESTS on every database: a change in the SQL store must be committed
    at once for other instances to see it, and a job body must not run inside the admin's transaction."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return view(request, *args, **kwargs)

    for alias in connections:
        wrapper = transaction.non_atomic_requests(using=alias)(wrapper)
    return wrapper


def named_post(what: str, permission: str) -> Callable[[NamedView], Callable[[Any, HttpRequest], HttpResponse]]:
    """A view that takes a POST naming a job or lock (``name``), from a user whom the admin's method
    ``permission`` allows: 405 for another method, 403 without the permission, 400 for a bad name."""

    def decorate(view: NamedView) -> Callable[[Any, HttpRequest], HttpResponse]:
        @functools.wraps(view)
        def checked(self: Any, request: HttpRequest) -> HttpResponse:
            if request.method != "POST":
                return HttpResponseNotAllowed(["POST"])
            if not getattr(self, permission)(request):
                raise PermissionDenied
            try:
                name = validate_job_name(request.POST.get("name", ""))
            except JobDefinitionError:
                return HttpResponseBadRequest(f"bad or missing {what} name")
            return view(self, request, name)

        return checked

    return decorate


class LockControlAdmin(LivePageAdmin[Lock]):
    """The control actions of the Locks page and the job's page; :class:`LockAdmin` adds the list itself."""

    control_template = "admin/mutexcron/lock/control_confirmation.html"
    job_template = "admin/mutexcron/lock/job.html"

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{PAUSE_PERMISSION}")

    def has_retime_permission(self, request: HttpRequest) -> bool:
        """Change or reset a job's schedule (an override of its timing only, never what it calls)."""
        return request.user.has_perm(f"{self.opts.app_label}.{RETIME_PERMISSION}")

    def control_urls(self) -> list[URLPattern]:
        views = {"pause": self.pause_view, "resume": self.resume_view, "schedule": self.schedule_view,
                 "reset-schedule": self.reset_schedule_view, "backfill": self.backfill_view, "bulk": self.bulk_view}
        return [path(f"{route}/", self.admin_site.admin_view(outside_request_transaction(view)),
                     name=f"{self.opts.app_label}_{self.opts.model_name}_{route.replace('-', '_')}")
                for route, view in views.items()]

    def control_context(self, request: HttpRequest) -> dict[str, Any]:
        """What the Locks page needs to offer the control actions this user may take."""
        def url(route: str) -> str:
            return reverse(f"admin:mutexcron_lock_{route}", current_app=self.admin_site.name)

        can_pause = self.has_pause_permission(request)
        return {"can_pause": can_pause, "can_retime": self.has_retime_permission(request),
                "pause_url": url("pause"), "resume_url": url("resume"), "schedule_url": url("schedule"),
                "reset_schedule_url": url("reset_schedule"), "bulk_url": url("bulk"), "backfill_url": url("backfill"),
                "bulk_actions": BULK_ACTIONS if can_pause else {}}

    def job_url(self, name: str) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_history", args=[quote(name)],
                       current_app=self.admin_site.name)

    def _read(self, name: str) -> tuple[LockState | None, datetime, JobSchedule | None]:
        """Job ``name``'s lock document, the store's clock and its schedule (None if not declared here, nor a
        run-time schedule this process can build)."""
        with open_store() as (conf, store):
            state, now = require_control(store, f"read the lock of job {name!r}").lock(name), store.now()
        job = self._job(name, state)
        return state, now, job_schedule(job_line(job, state, resolve_timezone(conf.timezone), now)) if job else None

    @staticmethod
    def _job(name: str, state: LockState | None) -> Job | None:
        """Job ``name``: declared in code, or the run-time schedule its document ``state`` defines (else None), as
        every scheduler builds them."""
        jobs = with_stored(default_registry, {name: state} if state is not None else {})
        return jobs.get(name) if name in jobs else None

    def _undeclared(self, request: HttpRequest, what: str) -> HttpResponse:
        return self._fail(request, what, ValueError("no job of that name is declared in this process"))

    def _confirm(self, request: HttpRequest, action: str, name: str, **context: Any) -> HttpResponse:
        try:
            state, now, schedule = self._read(name)
        except (ImproperlyConfigured, MutexcronError) as error:
            return self._fail(request, f"read “{name}”", error)
        return self._render(request, self.control_template, "Are you sure?", action=action, name=name,
                            names=[name], state=state, schedule=schedule, paused_line=paused_line(state, now),
                            job_url=self.job_url(name), **context)

    def _done(self, request: HttpRequest, name: str, message: str) -> None:
        self.message_user(request, f"“{name}”: {message}.", messages.SUCCESS)
        self.log_change(request, Lock(name=name), message)

    @named_post("job", permission="has_pause_permission")
    def pause_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: the pause form; with ``confirm=yes`` and a valid form: pause the job fleet-wide."""
        form = PauseForm(request.POST if request.POST.get("confirm") == "yes" else None)
        if not form.is_bound or not form.is_valid():
            return self._confirm(request, "pause", name, form=form, media=form.media)
        return self._pause(request, [name], form) or redirect(self._changelist_url())

    def _pause(self, request: HttpRequest, names: list[str], form: PauseForm) -> HttpResponse | None:
        """Pause each job; one that fails is reported and the others are still paused (None if all were)."""
        failed: HttpResponse | None = None
        for name in names:
            try:
                with open_store() as (_, store):
                    state = control.pause(store, default_registry, name, until=form.end(store.now()),
                                          by=request.user.get_username(), note=form.cleaned_data.get("note") or None)
            except (ImproperlyConfigured, MutexcronError, ValueError) as error:
                failed = self._fail(request, f"pause “{name}”", error)
                continue
            until = f"until {show_time(state.paused_until)}" if state.paused_until else "until resumed"
            self._done(request, name, f"Paused {until}")
        return failed

    @named_post("job", permission="has_pause_permission")
    def resume_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: a confirmation page; with ``confirm=yes``: lift the job's pause fleet-wide."""
        if request.POST.get("confirm") != "yes":
            return self._confirm(request, "resume", name)
        return self._resume(request, [name]) or redirect(self._changelist_url())

    def _resume(self, request: HttpRequest, names: list[str]) -> HttpResponse | None:
        """Resume each job; one that fails is reported and the others are still resumed (None if all were)."""
        failed: HttpResponse | None = None
        for name in names:
            try:
                with open_store() as (_, store):
                    control.resume(store, default_registry, name)
            except (ImproperlyConfigured, MutexcronError) as error:
                failed = self._fail(request, f"resume “{name}”", error)
                continue
            self._done(request, name, "Resumed")
        return failed

    @named_post("job", permission="has_retime_permission")
    def schedule_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: the schedule form; ``preview``: its next fires; ``confirm=yes``: override the schedule."""
        try:
            conf = get_settings()
            state, now, schedule = self._read(name)
        except (ImproperlyConfigured, MutexcronError) as error:
            return self._fail(request, f"read “{name}”", error)
        job, zone = self._job(name, state), resolve_timezone(conf.timezone)
        if schedule is None or job is None:
            return self._fail(request, f"change the schedule of “{name}”",
                              ValueError("no job of that name is declared in this process"))
        bound = "spec" in request.POST
        initial = {"spec": schedule.spec, "timezone": state.schedule_timezone if state else ""}
        form = ScheduleForm(request.POST if bound else None, initial=initial, job=job, default_zone=zone)
        if bound and request.POST.get("confirm") == "yes" and form.is_valid():
            try:
                with open_store() as (_, store):
                    new = control.set_schedule(store, default_registry, name, form.cleaned_data["spec"],
                                               timezone=form.cleaned_data["timezone"], by=request.user.get_username())
            except (ImproperlyConfigured, MutexcronError, ValueError) as error:
                return self._fail(request, f"change the schedule of “{name}”", error)
            zone_text = f" in {new.schedule_timezone}" if new.schedule_timezone else ""
            self._done(request, name, f"Schedule set to “{new.schedule}”{zone_text} (version {new.schedule_version})")
            return redirect(self._changelist_url())
        description, fires = form.preview(dj_timezone.now()) if bound else ("", [])
        return self._render(request, self.control_template, "Change schedule", action="schedule", name=name,
                            names=[name], state=state, schedule=schedule, paused_line=paused_line(state, now),
                            job_url=self.job_url(name), form=form, preview_description=description,
                            preview_fires=fires, current_fires=schedule.fires(dj_timezone.now()))

    @named_post("job", permission="has_retime_permission")
    def reset_schedule_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: a confirmation page; with ``confirm=yes``: go back to the code's schedule fleet-wide."""
        if request.POST.get("confirm") != "yes":
            return self._confirm(request, "reset_schedule", name)
        try:
            with open_store() as (_, store):
                state = control.set_schedule(store, default_registry, name, None, by=request.user.get_username())
        except (ImproperlyConfigured, MutexcronError) as error:
            return self._fail(request, f"reset the schedule of “{name}”", error)
        self._done(request, name, f"Schedule reset to the code's (version {state.schedule_version})")
        return redirect(self._changelist_url())

    @named_post("job", permission="has_change_permission")  # who may run a job now may backfill it
    def backfill_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: the range form; with ``confirm=yes`` and a valid range: backfill the job in a background
        thread of this web process (its runs go to the history as they end; the result is logged)."""
        if name not in default_registry:
            return self._undeclared(request, f"backfill “{name}”")
        job = default_registry.get(name)
        try:
            with open_store() as (conf, store):
                trigger = effective_trigger(store, job, resolve_timezone(conf.timezone))
            state, now, schedule = self._read(name)
        except (ImproperlyConfigured, MutexcronError) as error:
            return self._fail(request, f"read “{name}”", error)
        form = BackfillForm(request.POST if request.POST.get("confirm") == "yes" else None, job=job, trigger=trigger,
                           now=now)
        if not form.is_bound or not form.is_valid():
            return self._render(request, self.control_template, "Backfill", action="backfill", name=name,
                                names=[name], state=state, schedule=schedule, paused_line=paused_line(state, now),
                                job_url=self.job_url(name), form=form)
        start, end = form.cleaned_data["start"], form.cleaned_data["end"]
        start_backfill(name, start, end, request.user.get_username())
        self._done(request, name, f"Backfill of {len(form.ticks)} tick(s) from {start.isoformat()} to "
                                  f"{end.isoformat()} started in the background of this web process (its runs show "
                                  "in the history as they end)")
        return redirect(self._changelist_url())

    def bulk_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``action`` and ``names``: a confirmation page; with ``confirm=yes``: pause or resume them all."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_pause_permission(request):
            raise PermissionDenied
        action = request.POST.get("action", "")
        try:
            names = sorted({validate_job_name(name) for name in request.POST.getlist("names")})
        except JobDefinitionError:
            return HttpResponseBadRequest("bad job name")
        if action not in BULK_ACTIONS:
            return HttpResponseBadRequest("unknown action")
        if not names:
            self.message_user(request, "Select the jobs to act on first; nothing changed.", messages.WARNING)
            return redirect(self._changelist_url())
        confirmed = request.POST.get("confirm") == "yes"
        form = PauseForm(request.POST if confirmed else None)
        if not confirmed or (action == "pause_selected" and not form.is_valid()):
            return self._render(request, self.control_template, "Are you sure?", action=action, names=names,
                                form=form if action == "pause_selected" else None, media=form.media,
                                action_label=BULK_ACTIONS[action])
        failed = self._pause(request, names, form) if action == "pause_selected" else self._resume(request, names)
        return failed or redirect(self._changelist_url())

    def history_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
                     ) -> HttpResponse:
        """The job's page: its schedule, pause and lock read live from the store, and every change made here."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        name = unquote(object_id)
        try:
            state, now, schedule = self._read(validate_job_name(name))
        except (ImproperlyConfigured, MutexcronError) as error:
            return self._fail(request, f"read “{name}”", error)
        models = ContentType.objects.get_for_models(Lock, Schedule, for_concrete_models=False).values()
        entries = LogEntry.objects.filter(content_type__in=models, object_id=name).select_related(
            "user").order_by("-action_time")
        return self._render(request, self.job_template, f"Job {name}", name=name, state=state, schedule=schedule,
                            fires=schedule.fires(dj_timezone.now()) if schedule else [],
                            paused_line=paused_line(state, now), entries=entries, **(extra_context or {}))
