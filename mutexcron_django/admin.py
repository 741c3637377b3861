"""The admin: every declared job with its LIVE lock state from the configured store, "run now" and
"force unlock" actions, and the run history.

The Locks page is not a list of ``Lock`` rows: it reads the store named by ``MUTEXCRON['STORE']``
(the SQL table, Redis or MongoDB) at each request, so it shows the state the schedulers see.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.db import connections, router, transaction
from django.db.models import F, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone as dj_timezone
from django.utils.html import format_html

from mutexcron import Job, LockBusy, Outcome, RunRecord, default_registry, next_fire_times
from mutexcron.cron import resolve_timezone
from mutexcron.errors import JobDefinitionError, MutexcronError, UnknownJobError
from mutexcron.registry import validate_job_name
from mutexcron.stores import LockState, LockStore
from mutexcron.urls import scrub

from . import runtime
from .conf import MutexcronSettings, get_settings
from .models import JobRun, Lock, ScheduledTask

logger = logging.getLogger("mutexcron.django")

FORCE_UNLOCK_PERMISSION = "force_unlock_lock"  # declared in Lock.Meta.permissions
_SECRET_QUERY_KEYS = {"password", "pass", "pwd", "secret", "token", "authsource_password"}


# -- reading the store ------------------------------------------------------------------------------


def _secrets(conf: MutexcronSettings | None) -> list[str]:
    """The password(s) written in the store URL, to be scrubbed from any text shown on a page."""
    if conf is None or not isinstance(conf.store, str):
        return []
    try:
        parts = urlsplit(conf.store)
        found = [parts.password or ""]
        found += [value for key, value in parse_qsl(parts.query) if key.lower() in _SECRET_QUERY_KEYS]
    except ValueError:
        return []
    found += [unquote(secret) for secret in found]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def _scrub(text: str, conf: MutexcronSettings | None) -> str:
    """``text`` without the store's password. Stores already mask it; this guards client libraries' messages."""
    for secret in _secrets(conf):
        text = text.replace(secret, "***")
    return text


@contextmanager
def _open_store() -> Iterator[tuple[MutexcronSettings, LockStore]]:
    """The configured store, closed afterwards (unless settings hold a shared LockStore object)."""
    conf = get_settings()
    store = conf.build_store()
    try:
        yield conf, store
    finally:
        if isinstance(conf.store, str):  # we built it; a LockStore object in settings is shared
            with suppress(Exception):
                store.close()


@dataclass
class StoreSnapshot:
    """What the Locks page shows about the store: its lock documents and clock, or why it could not be read."""

    description: str = ""
    states: dict[str, LockState] = dataclasses.field(default_factory=dict)
    now: datetime | None = None
    error: str | None = None


def read_store() -> StoreSnapshot:
    """Every lock document and the store's clock; an unreachable or misconfigured store gives ``error``."""
    snapshot = StoreSnapshot()
    conf: MutexcronSettings | None = None
    try:
        with _open_store() as (conf, store):
            snapshot.description = _scrub(repr(store), conf)
            snapshot.states = {state.name: state for state in store.locks()}
            snapshot.now = store.now()
    except (ImproperlyConfigured, MutexcronError) as error:
        snapshot.error = _scrub(str(error), conf)
    except Exception as error:  # a custom store's bug must not take the page down either
        logger.exception("mutexcron admin: reading the lock store failed")
        snapshot.error = _scrub(f"{type(error).__name__}: {error}", conf)
    return snapshot


# -- the rows of the Locks page ---------------------------------------------------------------------

STATUS_LABELS = {
    "held": "Locked",
    "expired": "Lease expired",  # locked, but its holder stopped renewing: the next fire takes it
    "free": "Free",
    "missing": "No lock yet",  # no lock document: seeded at scheduler start, created by the first run
    "unknown": "Unknown",  # the store could not be read
}


@dataclass
class LockRow:
    name: str
    job: Job | None  # None: an orphan lock, whose job is not declared (removed or renamed)
    timezone: str
    timezone_inherited: bool
    next_fire: str
    next_fire_iso: str
    state: LockState | None
    status: str
    lock_until: str
    lease_left: str
    last_fire: str
    last_run: JobRun | None
    last_run_url: str
    history_url: str

    @property
    def orphan(self) -> bool:
        return self.job is None

    @property
    def spec(self) -> str:
        return self.job.spec.expression if self.job else ""

    @property
    def status_label(self) -> str:
        return STATUS_LABELS[self.status]

    @property
    def holder(self) -> str:
        return (self.state.locked_by or "") if self.state and self.state.locked else ""

    @property
    def locked(self) -> bool:
        return bool(self.state and self.state.locked)


def _zone_name(zone: tzinfo) -> str:
    return getattr(zone, "key", None) or str(zone)


def _show(moment: datetime | None, zone: tzinfo | None = None) -> str:
    if moment is None:
        return ""
    local = moment.astimezone(zone or dj_timezone.get_current_timezone())
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


def _seconds_column(field: str, description: str, empty: str = "") -> Callable[[Any, Any], str]:
    """An admin column showing a time field with seconds (Django's default format stops at minutes)."""

    @admin.display(description=description, ordering=field)
    def column(self: Any, obj: Any) -> str:
        return _show(getattr(obj, field)) or empty

    return column


def format_duration(duration: timedelta | None) -> str:
    if duration is None:
        return ""
    seconds = duration.total_seconds()
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d} min"


def last_runs(names: list[str]) -> dict[str, JobRun]:
    """Each job's latest run record that tells something: ``skipped_already_ran`` records are only the
    other instances' echo of a tick that ran elsewhere, so they never hide the run itself."""
    if not names:
        return {}
    telling = JobRun.objects.exclude(outcome=JobRun.Outcome.SKIPPED_ALREADY_RAN)
    latest = telling.filter(job_name=OuterRef("job_name")).order_by("-started_at", "-pk").values("pk")[:1]
    runs = telling.filter(job_name__in=names, pk=Subquery(latest))
    return {run.job_name: run for run in runs}


def _history_filter_url(job_name: str) -> str:
    """The run history filtered to one job."""
    return reverse("admin:mutexcron_jobrun_changelist") + "?" + urlencode({"job_name__exact": job_name})


def build_rows(snapshot: StoreSnapshot, *, scheduler_timezone: tzinfo, now: datetime) -> list[LockRow]:
    jobs = {job.name: job for job in default_registry}
    names = sorted(set(jobs) | set(snapshot.states))
    runs = last_runs(names)
    rows = []
    for name in names:
        job, state = jobs.get(name), snapshot.states.get(name)
        zone = (job.timezone if job else None) or scheduler_timezone
        next_fire = next_fire_times(job.spec, after=now, timezone=zone)[0] if job else None
        if snapshot.error is not None:
            status = "unknown"
        elif state is None:
            status = "missing"
        elif snapshot.now is not None and state.is_held(snapshot.now):
            status = "held"
        else:
            status = "expired" if state.locked else "free"
        lease_left = ""
        if status == "held" and state is not None and state.lock_until and snapshot.now:
            lease_left = format_duration(state.lock_until - snapshot.now)
        run = runs.get(name)
        rows.append(LockRow(
            name=name,
            job=job,
            timezone=_zone_name(zone) if job else "",
            timezone_inherited=bool(job and job.timezone is None),
            next_fire=_show(next_fire, zone),
            next_fire_iso=next_fire.isoformat() if next_fire else "",
            state=state,
            status=status,
            lock_until=_show(state.lock_until) if state and state.locked else "",
            lease_left=lease_left,
            last_fire=_show(state.last_fire_time) if state else "",
            last_run=run,
            last_run_url=reverse("admin:mutexcron_jobrun_change", args=[run.pk]) if run else "",
            history_url=_history_filter_url(name),
        ))
    return rows


# -- running a job from the admin -------------------------------------------------------------------


def run_job_now(job: Job) -> RunRecord:
    """Run ``job`` now in this thread, under its lock, with history and signals, as ``manage.py`` would.

    A job whose ``on_busy`` is ``"wait"`` is run as ``"skip"`` here: a request must not wait up to a lease
    for a busy lock.
    """
    try:
        return runtime.run_now(job.name, on_busy="skip" if job.on_busy == "wait" else None)
    except LockBusy as busy:
        if isinstance(busy.record, RunRecord):
            return busy.record
        raise


def _last_line(text: str | None) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _outside_request_transaction(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Exempt ``view`` from ATOMIC_REQUESTS on every database: a lock taken in the SQL store must be
    committed at once (not when the request ends) for other instances to see it, and a job body must not
    run inside the admin's transaction."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return view(request, *args, **kwargs)

    for alias in connections:
        wrapper = transaction.non_atomic_requests(using=alias)(wrapper)
    return wrapper


# -- the admin classes ------------------------------------------------------------------------------


@admin.register(Lock)
class LockAdmin(admin.ModelAdmin):
    """The Locks page: every declared job and every lock in the store, read live at each request."""

    change_list_template = "admin/mutexcron/lock/change_list.html"
    force_unlock_template = "admin/mutexcron/lock/force_unlock_confirmation.html"

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
            path("run/", site.admin_view(_outside_request_transaction(self.run_now_view)),
                 name="{}_{}_run".format(*info)),
            path("force-unlock/", site.admin_view(_outside_request_transaction(self.force_unlock_view)),
                 name="{}_{}_force_unlock".format(*info)),
            *super().get_urls(),
        ]

    def _changelist_url(self) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                       current_app=self.admin_site.name)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        snapshot = read_store()
        try:
            conf = get_settings()
            scheduler_timezone = resolve_timezone(conf.timezone)
        except ImproperlyConfigured as error:
            snapshot.error = snapshot.error or str(error)
            scheduler_timezone = resolve_timezone("UTC")
        rows = build_rows(snapshot, scheduler_timezone=scheduler_timezone, now=dj_timezone.now())
        history_url = ""
        if request.user.has_perm(f"{self.opts.app_label}.view_jobrun") or request.user.has_perm(
            f"{self.opts.app_label}.change_jobrun"
        ):
            history_url = reverse("admin:mutexcron_jobrun_changelist", current_app=self.admin_site.name)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": "Job locks",
            "subtitle": None,
            "rows": rows,
            "declared_count": sum(1 for row in rows if not row.orphan),
            "orphan_count": sum(1 for row in rows if row.orphan),
            "store": snapshot,
            "scheduler_timezone": _zone_name(scheduler_timezone),
            "store_time": _show(snapshot.now),
            "can_run": self.has_change_permission(request),
            "can_force_unlock": self.has_force_unlock_permission(request),
            "run_url": reverse("admin:mutexcron_lock_run", current_app=self.admin_site.name),
            "force_unlock_url": reverse("admin:mutexcron_lock_force_unlock", current_app=self.admin_site.name),
            "history_url": history_url,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
                    ) -> HttpResponse:
        # A row of the SQL table is not the truth for Redis or MongoDB stores: the Locks page is.
        return redirect(self._changelist_url())

    @staticmethod
    def _posted_name(request: HttpRequest) -> str | None:
        try:
            return validate_job_name(request.POST.get("name", ""))
        except JobDefinitionError:
            return None

    def run_now_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``name``: run the job now under its lock and report the outcome as a message."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        name = self._posted_name(request)
        if name is None:
            return HttpResponseBadRequest("bad or missing job name")
        try:
            job = default_registry.get(name)
        except UnknownJobError:
            self.message_user(request, f"Job “{name}” is not declared in this process; it cannot be run.",
                              messages.ERROR)
            return redirect(self._changelist_url())
        try:
            record = run_job_now(job)
        except (ImproperlyConfigured, MutexcronError) as error:
            conf = None
            with suppress(ImproperlyConfigured):
                conf = get_settings()
            self.message_user(request, f"Job “{name}” was not run: {_scrub(str(error), conf)}", messages.ERROR)
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
        elif outcome is Outcome.FAILED:
            self.message_user(
                request,
                f"Job “{name}” ran on {record.instance_id} and failed after {took}: {_last_line(record.error)} "
                "(the traceback is in the run history).",
                messages.ERROR,
            )
        elif outcome is Outcome.SKIPPED_BUSY:
            self.message_user(request, f"Job “{name}” did not run: {record.error or 'its lock is busy'}.",
                              messages.WARNING)
        elif outcome is Outcome.SKIPPED_STORE_ERROR:
            conf = None
            with suppress(ImproperlyConfigured):
                conf = get_settings()
            self.message_user(
                request,
                f"Job “{name}” did not run: the lock store cannot be reached: {_scrub(record.error or '', conf)}",
                messages.ERROR,
            )
        else:
            self.message_user(request, f"Job “{name}” did not run: {outcome} {record.error or ''}".strip(),
                              messages.WARNING)
        if record.lock_lost:
            self.message_user(request, f"Job “{name}” lost its lock while it ran (its lease ran out or it was "
                              "force-unlocked).", messages.WARNING)

    def force_unlock_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``name``: a confirmation page; POST ``name`` and ``confirm=yes``: free the lock."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_force_unlock_permission(request):
            raise PermissionDenied
        name = self._posted_name(request)
        if name is None:
            return HttpResponseBadRequest("bad or missing lock name")
        conf: MutexcronSettings | None = None
        state: LockState | None = None
        try:
            with _open_store() as (conf, store):
                state = store.lock(name)
                if request.POST.get("confirm") != "yes":
                    return self._force_unlock_confirmation(request, name, state, store, conf)
                unlocked = store.force_unlock(name)
        except (ImproperlyConfigured, MutexcronError) as error:
            self.message_user(request, f"Could not force-unlock “{name}”: {_scrub(str(error), conf)}",
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
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": "Are you sure?",
            "subtitle": None,
            "name": name,
            "state": state,
            "held": held,
            "declared": name in default_registry,
            "lock_until": _show(state.lock_until) if state else "",
            "store_description": _scrub(repr(store), conf),
            "changelist_url": self._changelist_url(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.force_unlock_template, context)


@admin.register(JobRun)
class JobRunAdmin(admin.ModelAdmin):
    """The run history: every fire on every instance, read-only."""

    list_display = ("job_name", "fire_time_display", "instance_id", "outcome", "started_at_display",
                    "duration_display", "lock_lost", "manual")
    list_filter = ("job_name", "outcome", ("started_at", admin.DateFieldListFilter), "lock_lost", "manual")
    search_fields = ("job_name", "instance_id", "error")
    date_hierarchy = "started_at"
    list_per_page = 100
    fields = ("job_name", "fire_time_display", "instance_id", "outcome", "started_at_display",
              "finished_at_display", "duration_display", "token", "lock_lost", "manual", "error_display")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # Times with seconds (Django's default format stops at minutes; ticks can be seconds apart).
    fire_time_display = _seconds_column("fire_time", "fire time")
    started_at_display = _seconds_column("started_at", "started at")
    finished_at_display = _seconds_column("finished_at", "finished at", empty="-")

    @admin.display(description="duration", ordering=F("finished_at") - F("started_at"))
    def duration_display(self, obj: JobRun) -> str:
        return format_duration(obj.duration) or "-"

    @admin.display(description="error")
    def error_display(self, obj: JobRun) -> str:
        if not obj.error:
            return "-"
        return format_html(
            '<pre class="mutexcron-error" style="white-space: pre-wrap; overflow-x: auto; margin: 0; '
            'font-size: 0.85em; line-height: 1.4;">{}</pre>',
            obj.error,
        )


# -- scheduled tasks (the ``django://`` task backend's table) ----------------------------------------------
#
# The page is always registered: the table exists after ``migrate`` whatever the backend. When
# MUTEXCRON["TASKS"]["BACKEND"] is ``django://`` it lists the live queue, and its "cancel" and "retry"
# actions go through the TaskQueue (so the backend's own rules apply: only a task that has not started
# can be cancelled, only a failed one retried). With another backend (Redis, RabbitMQ) the page shows the
# table read-only, without actions, and says where the tasks really are.


def _task_backend_alias() -> str | None:
    """The database alias of the configured ``django://`` task backend, or None for another backend."""
    conf = get_settings().tasks
    backend = conf.backend
    if isinstance(backend, str):
        scheme, _, rest = backend.partition("://")
        if scheme.lower() != "django":
            return None
        return rest.strip("/") or router.db_for_read(ScheduledTask)
    if type(backend).__module__ == "mutexcron_django.tasks_backend":  # a DjangoTaskBackend object
        return getattr(backend, "using", None) or router.db_for_read(ScheduledTask)
    return None


def _task_secrets_scrubbed(text: str) -> str:
    with suppress(ImproperlyConfigured):
        for url in get_settings().tasks.urls:
            text = scrub(text, url)
    return text


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(admin.ModelAdmin):
    """Scheduled, running, failed and finished tasks of the ``django://`` backend, with cancel and retry."""

    list_display = ("id", "task_type", "status", "due_display", "attempts", "claimed_by", "updated_at_display",
                    "error_summary")
    list_filter = ("status", "task_type")
    search_fields = ("=id", "task_type")
    list_per_page = 100
    ordering = ("-created_at",)
    actions = ("cancel_tasks", "retry_tasks")
    fields = ("id", "task_type", "status", "payload_display", "run_at_display", "due_display", "attempts",
              "claimed_by", "visible_until_display", "created_at_display", "started_at_display",
              "finished_at_display", "error_display")
    readonly_fields = fields

    def _alias(self) -> str | None:
        try:
            return _task_backend_alias()
        except ImproperlyConfigured:
            return None

    def get_queryset(self, request: HttpRequest) -> Any:
        queryset = super().get_queryset(request)
        alias = self._alias()
        return queryset.using(alias) if alias else queryset

    # Rows are written by the queue only: no add, no edit form, no bulk delete (it would bypass the queue).
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Cancel and retry: the "change scheduled task" permission, and the django:// backend configured."""
        allowed = request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")
        return allowed and self._alias() is not None

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = dict(extra_context or {})
        try:
            conf = get_settings().tasks
            if self._alias() is None:
                extra_context.setdefault("subtitle", (
                    f"Read only: the task queue is {_task_secrets_scrubbed(conf.describe())} "
                    "(MUTEXCRON['TASKS']['BACKEND']); these are the rows of the django:// backend's table, "
                    "not that queue's tasks."
                ))
        except ImproperlyConfigured as error:
            extra_context.setdefault("subtitle", f"Read only: {_task_secrets_scrubbed(str(error))}")
        return super().changelist_view(request, extra_context)

    def _operate(self, request: HttpRequest, queryset: Any, verb: str, done: str, refused: str,
                 operation: Callable[[Any, str], bool]) -> None:
        from .tasks import get_task_queue

        ids = list(queryset.values_list("id", flat=True))
        succeeded: list[str] = []
        unchanged: list[str] = []
        try:
            queue = get_task_queue()
            for task_id in ids:
                (succeeded if operation(queue, task_id) else unchanged).append(task_id)
        except (ImproperlyConfigured, MutexcronError) as error:
            self.message_user(request, f"Could not {verb} the tasks: {_task_secrets_scrubbed(str(error))}"
                              + (f" ({len(succeeded)} {done} before the error: {', '.join(succeeded)})"
                                 if succeeded else ""), messages.ERROR)
            return
        finally:
            for obj in ScheduledTask.objects.using(queryset.db).filter(id__in=succeeded):
                self.log_change(request, obj, f"{done.capitalize()} from the admin")
        if succeeded:
            self.message_user(request, f"{done.capitalize()} {len(succeeded)} task(s): {', '.join(succeeded)}.",
                              messages.SUCCESS)
        if unchanged:
            self.message_user(request, f"{len(unchanged)} task(s) not {done} ({refused}): {', '.join(unchanged)}.",
                              messages.WARNING)

    @admin.action(description="Cancel the selected tasks (those that have not started)", permissions=["operate"])
    def cancel_tasks(self, request: HttpRequest, queryset: Any) -> None:
        self._operate(request, queryset, "cancel", "cancelled",
                      "only a scheduled task that has not started can be cancelled",
                      lambda queue, task_id: queue.cancel(task_id))

    @admin.action(description="Retry the selected failed tasks now", permissions=["operate"])
    def retry_tasks(self, request: HttpRequest, queryset: Any) -> None:
        self._operate(request, queryset, "retry", "retried", "only a failed task can be retried",
                      lambda queue, task_id: queue.retry(task_id))

    # Times with seconds, as on the other pages.
    due_display = _seconds_column("due", "due")
    run_at_display = _seconds_column("run_at", "scheduled for")
    updated_at_display = _seconds_column("updated_at", "updated at")
    created_at_display = _seconds_column("created_at", "created at")
    started_at_display = _seconds_column("started_at", "started at", empty="-")
    finished_at_display = _seconds_column("finished_at", "finished at", empty="-")

    @admin.display(description="claim expires", ordering="visible_until")
    def visible_until_display(self, obj: ScheduledTask) -> str:
        return _show(obj.visible_until) if obj.status == ScheduledTask.Status.RUNNING else "-"

    @admin.display(description="error")
    def error_summary(self, obj: ScheduledTask) -> str:
        return _last_line(obj.error) or "-"

    @admin.display(description="payload")
    def payload_display(self, obj: ScheduledTask) -> str:
        try:
            text = json.dumps(json.loads(obj.payload), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            text = obj.payload or ""
        return format_html('<pre class="mutexcron-payload" style="white-space: pre-wrap; margin: 0;">{}</pre>', text)

    @admin.display(description="error")
    def error_display(self, obj: ScheduledTask) -> str:
        if not obj.error:
            return "-"
        return format_html(
            '<pre class="mutexcron-error" style="white-space: pre-wrap; overflow-x: auto; margin: 0; '
            'font-size: 0.85em; line-height: 1.4;">{}</pre>',
            obj.error,
        )
