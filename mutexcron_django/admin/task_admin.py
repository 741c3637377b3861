"""The scheduled tasks page (the ``django://`` task backend's table), with cancel and retry actions.

The page is always registered: the table exists after ``migrate`` whatever the backend. When
MUTEXCRON["TASKS"]["BACKEND"] is ``django://`` it lists the live queue, and its "cancel" and "retry"
actions go through the TaskQueue (so the backend's own rules apply: only a task that has not started
can be cancelled, only a failed one retried). With another backend (Redis, RabbitMQ) the page shows the
table read-only, without actions, and says where the tasks really are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured
from django.db import router
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html

from mutexcron.errors import MutexcronError

from ..conf import get_settings
from ..models import ScheduledTask
from .display import (
    ModelAdmin,
    WrittenByMutexcron,
    error_block,
    last_line,
    seconds_column,
    show_time,
    utc_time,
    with_utc_times,
    without_task_secrets,
)
from .task_chart import pending_charts


def _task_backend_alias() -> str | None:
    """The database alias of the configured ``django://`` task backend, or None for another backend."""
    conf = get_settings().tasks
    backend = conf.backend
    if isinstance(backend, str):
        scheme, _, rest = backend.partition("://")
        if scheme.lower() != "django":
            return None
        return rest.strip("/") or router.db_for_read(ScheduledTask)
    return backend.database_alias  # a backend object says where its tasks table is, if it has one


_TIMES = ("run_at", "due", "visible_until", "created_at", "updated_at", "started_at", "finished_at")


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(WrittenByMutexcron, ModelAdmin[ScheduledTask]):
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
        queryset = with_utc_times(super().get_queryset(request), _TIMES)
        alias = self._alias()
        return queryset.using(alias) if alias else queryset

    # Rows are written by the queue only: no add, no edit form, no bulk delete (it would bypass the queue).
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
                    f"Read only: the task queue is {without_task_secrets(conf.describe())} "
                    "(MUTEXCRON['TASKS']['BACKEND']); these are the rows of the django:// backend's table, "
                    "not that queue's tasks."
                ))
        except ImproperlyConfigured as error:
            extra_context.setdefault("subtitle", f"Read only: {without_task_secrets(str(error))}")
        alias = self._alias()
        if alias is not None:  # the django:// backend's own table: waiting tasks by due time (task_chart)
            extra_context.setdefault("pending_charts", pending_charts(alias))
        return super().changelist_view(request, extra_context)

    def _operate(self, request: HttpRequest, queryset: Any, verb: str, done: str, refused: str,
                 operation: Callable[[Any, str], bool]) -> None:
        from ..tasks import get_task_queue

        ids = list(queryset.values_list("id", flat=True))
        succeeded: list[str] = []
        unchanged: list[str] = []
        try:
            queue = get_task_queue()
            for task_id in ids:
                (succeeded if operation(queue, task_id) else unchanged).append(task_id)
        except (ImproperlyConfigured, MutexcronError) as error:
            self.message_user(request, f"Could not {verb} the tasks: {without_task_secrets(str(error))}"
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
    due_display = seconds_column("due", "due")
    run_at_display = seconds_column("run_at", "scheduled for")
    updated_at_display = seconds_column("updated_at", "updated at")
    created_at_display = seconds_column("created_at", "created at")
    started_at_display = seconds_column("started_at", "started at", empty="-")
    finished_at_display = seconds_column("finished_at", "finished at", empty="-")

    @admin.display(description="claim expires", ordering="visible_until")
    def visible_until_display(self, obj: ScheduledTask) -> str:
        return show_time(utc_time(obj, "visible_until")) if obj.status == ScheduledTask.Status.RUNNING else "-"

    @admin.display(description="error")
    def error_summary(self, obj: ScheduledTask) -> str:
        return last_line(obj.error) or "-"

    @admin.display(description="payload")
    def payload_display(self, obj: ScheduledTask) -> str:
        try:
            text = json.dumps(json.loads(obj.payload), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            text = obj.payload or ""
        return format_html('<pre class="mutexcron-payload" style="white-space: pre-wrap; margin: 0;">{}</pre>', text)

    @admin.display(description="error")
    def error_display(self, obj: ScheduledTask) -> str:
        return error_block(obj.error)
