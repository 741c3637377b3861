"""The Run-time schedules page: list, add, edit, enable, disable and delete the schedules kept in the configured
store (``Scheduler.add_schedule``), through a scheduler built from settings and never started. Every write is
outside the request's transaction, done ``by=<username>`` and recorded as a LogEntry (shown on the job's page).

Permissions are the ``Schedule`` proxy model's: ``view_schedule`` (or change) to list, ``add_schedule``,
``change_schedule`` (edit, enable, disable) and ``delete_schedule``; the Lock model's ``retime_lock`` (the Locks page's
schedule changes) grants none of them. See docs/django.md, Admin permissions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse

from mutexcron import default_registry
from mutexcron.definitions import ScheduleDefinition
from mutexcron.errors import JobDefinitionError, MutexcronError
from mutexcron.registry import BusyPolicy, CatchUp, validate_job_name
from mutexcron.stores import LockState

from ..models import Schedule
from .control_views import named_post, outside_request_transaction
from .display import current_settings
from .pages import LivePageAdmin, reason
from .schedule_forms import RuntimeScheduleForm
from .schedule_rows import read_schedules, schedule_state, settings_scheduler

NO_TARGETS = ("No target is allowed in this process, so no schedule can be added: mark a function with "
              "@mutexcron.callable_target() in an app's cron.py (or allow it with Registry.allow), then reload "
              "this page.")


def definition_line(state: LockState) -> str:
    """A definition as a change message: ``target(kwargs) at spec``."""
    try:
        definition = ScheduleDefinition.from_json(state.definition or "")
    except ValueError:
        return state.definition or ""
    zone = f" in {definition.timezone}" if definition.timezone else ""
    return f"{definition.target} with {definition.kwargs} at “{definition.spec}”{zone}"


@admin.register(Schedule)
class ScheduleAdmin(LivePageAdmin[Schedule]):
    """The Run-time schedules page, read live from the store at each request."""

    change_list_template = "admin/mutexcron/schedule/change_list.html"
    form_template = "admin/mutexcron/schedule/form.html"
    delete_template = "admin/mutexcron/schedule/delete_confirmation.html"

    def get_urls(self) -> list[URLPattern]:
        prefix, site = f"{self.opts.app_label}_{self.opts.model_name}", self.admin_site
        views: dict[str, tuple[str, Callable[..., HttpResponse]]] = {
            "": ("changelist", self.changelist_view), "add/": ("add", self.add_view),
            "enable/": ("enable", self.enable_view), "disable/": ("disable", self.disable_view),
            "<path:object_id>/change/": ("change", self.change_view),
            "<path:object_id>/delete/": ("delete", self.delete_view)}
        return [path(route, site.admin_view(outside_request_transaction(view)), name=f"{prefix}_{name}")
                for route, (name, view) in views.items()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        listing = read_schedules()
        locks_url = reverse("admin:mutexcron_lock_changelist", current_app=self.admin_site.name)
        return self._render(
            request, self.change_list_template, "Run-time schedules", listing=listing, locks_url=locks_url,
            add_url=reverse("admin:mutexcron_schedule_add", current_app=self.admin_site.name),
            enable_url=reverse("admin:mutexcron_schedule_enable", current_app=self.admin_site.name),
            disable_url=reverse("admin:mutexcron_schedule_disable", current_app=self.admin_site.name),
            can_add=self.has_add_permission(request), can_change=self.has_change_permission(request),
            can_delete=self.has_delete_permission(request), targets=default_registry.targets(),
            no_targets=NO_TARGETS, **(extra_context or {}))

    # -- add and edit ------------------------------------------------------------------------------------

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
                 ) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        return self._form_view(request, None)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        return self._form_view(request, unquote(object_id))

    def _form_view(self, request: HttpRequest, name: str | None) -> HttpResponse:
        """The schedule's form (``name`` None: a new one); a valid POST stores it and goes back to the list."""
        what = f"edit run-time schedule “{name}”" if name is not None else "add a run-time schedule"
        initial: dict[str, Any] = {}
        state: LockState | None = None
        try:
            with settings_scheduler() as scheduler:
                zone = scheduler.timezone
                if name is not None:
                    state = schedule_state(scheduler, validate_job_name(name))
                    if state is None:
                        return self._fail(request, what, LookupError("the store has no run-time schedule of "
                                                                     "that name (deleted meanwhile?)"))
                    initial = RuntimeScheduleForm.initial_of(name, ScheduleDefinition.from_json(
                        state.definition or ""))
        except (ImproperlyConfigured, MutexcronError, ValueError) as error:
            return self._fail(request, what, error)
        targets = default_registry.targets()
        form = RuntimeScheduleForm(request.POST if request.method == "POST" else None, initial=initial,
                                   targets=targets, editing=name is not None,
                                   scheduler_zone=getattr(zone, "key", None) or str(zone))
        if form.is_bound and form.is_valid():
            saved = self._save(request, form, adding=name is None)
            if saved is not None:
                return saved
        title = f"Change run-time schedule {name}" if name is not None else "Add run-time schedule"
        return self._render(request, self.form_template, title, form=form, name=name, state=state,
                            description=form.spec_description(), no_targets=NO_TARGETS if not targets else "",
                            job_url=reverse("admin:mutexcron_lock_history", args=[quote(name)]) if name else "",
                            delete_url=reverse("admin:mutexcron_schedule_delete", args=[quote(name)])
                            if name and self.has_delete_permission(request) else "")

    def _save(self, request: HttpRequest, form: RuntimeScheduleForm, *, adding: bool) -> HttpResponse | None:
        """Store the form's schedule; None (with the form's errors set) if it is refused or the store fails."""
        data = form.cleaned_data
        name = data["name"]
        try:
            with settings_scheduler() as scheduler:
                exists = schedule_state(scheduler, name) is not None
                if exists == adding:
                    form.add_error("name" if adding else None, "A run-time schedule of this name exists: edit it "
                                   "instead." if adding else "This run-time schedule was deleted meanwhile.")
                    return None
                state = scheduler.add_schedule(
                    name, data["spec"], data["target"], kwargs=data["kwargs"], timezone=data["timezone"],
                    lease=data["lease"], catch_up=cast("CatchUp", data["catch_up"]), run_on=data["run_on"],
                    timeout=data["timeout"], start_deadline=data["start_deadline"],
                    on_busy=cast("BusyPolicy", data["on_busy"]), pause_on_failure=data["pause_on_failure"],
                    by=request.user.get_username())
        except JobDefinitionError as error:
            form.definition_error(error)
            return None
        except (ImproperlyConfigured, MutexcronError) as error:
            form.add_error(None, f"Could not save: {reason(error, current_settings())}")
            return None
        line = definition_line(state)
        if adding:
            self.log_addition(request, Schedule(name=name), f"Added: {line}")
        else:
            self.log_change(request, Schedule(name=name), f"Changed: {line}")
        self.message_user(request, f"Run-time schedule “{name}” {'added' if adding else 'saved'}: {line}. Every "
                          "running instance follows it within its sync interval.", messages.SUCCESS)
        return redirect(self._changelist_url())

    # -- enable, disable, delete -------------------------------------------------------------------------

    @named_post("schedule", permission="has_change_permission")
    def enable_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: lift the schedule's pause fleet-wide (it runs again from its next tick)."""
        return self._switch(request, name, enable=True)

    @named_post("schedule", permission="has_change_permission")
    def disable_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """POST ``name``: pause the schedule fleet-wide until enabled (a run going on finishes)."""
        return self._switch(request, name, enable=False)

    def _switch(self, request: HttpRequest, name: str, *, enable: bool) -> HttpResponse:
        what = f"{'enable' if enable else 'disable'} run-time schedule “{name}”"
        try:
            with settings_scheduler() as scheduler:
                if schedule_state(scheduler, name) is None:
                    return self._fail(request, what, LookupError("the store has no run-time schedule of that name"))
                if enable:
                    scheduler.resume(name)
                else:
                    scheduler.pause(name, by=request.user.get_username())
        except (ImproperlyConfigured, MutexcronError, ValueError) as error:
            return self._fail(request, what, error)
        done = "Enabled" if enable else "Disabled (paused until enabled)"
        self.log_change(request, Schedule(name=name), done)
        self.message_user(request, f"“{name}”: {done}.", messages.SUCCESS)
        return redirect(self._changelist_url())

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
                    ) -> HttpResponse:
        """GET: a confirmation page; POST: remove the schedule fleet-wide (no tick of it starts afterwards)."""
        if not self.has_delete_permission(request):
            raise PermissionDenied
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        name = unquote(object_id)
        what = f"delete run-time schedule “{name}”"
        try:
            with settings_scheduler() as scheduler:
                state = schedule_state(scheduler, validate_job_name(name))
                if state is None:
                    return self._fail(request, what, LookupError("the store has no run-time schedule of that name"))
                if request.method != "POST":
                    return self._render(request, self.delete_template, "Are you sure?", name=name, state=state,
                                        definition=definition_line(state))
                scheduler.remove_schedule(name, by=request.user.get_username())
        except (ImproperlyConfigured, MutexcronError, ValueError) as error:
            return self._fail(request, what, error)
        assert request.user.pk is not None  # an admin view's user is logged in
        LogEntry.objects.log_actions(request.user.pk, [Schedule(name=name)], DELETION,
                                     change_message=f"Deleted: {definition_line(state)}")
        self.message_user(request, f"Run-time schedule “{name}” deleted: no tick of it runs any more.",
                          messages.SUCCESS)
        return redirect(self._changelist_url())
