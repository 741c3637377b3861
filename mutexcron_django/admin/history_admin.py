"""The run history page: one row per tick (the run, with every instance's fire folded in: ``fired_count`` and
``fired_by``), and rows of their own for manual runs and other skips (``JobRun``), read-only, times with seconds."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import F, QuerySet
from django.http import HttpRequest

from ..models import JobRun
from .display import (
    ModelAdmin,
    WrittenByMutexcron,
    error_block,
    format_duration,
    seconds_column,
    with_utc_times,
)


@admin.register(JobRun)
class JobRunAdmin(WrittenByMutexcron, ModelAdmin[JobRun]):
    """The run history: every fire on every instance, read-only."""

    list_display = ("job_name", "fire_time_display", "instance_id", "outcome", "started_at_display",
                    "duration_display", "fired_count", "lock_lost", "manual", "backfill")
    list_filter = ("job_name", "outcome", ("started_at", admin.DateFieldListFilter), "lock_lost", "manual",
                   "backfill")
    search_fields = ("job_name", "instance_id", "error", "task_id")
    date_hierarchy = "started_at"
    list_per_page = 100
    fields = ("job_name", "fire_time_display", "instance_id", "outcome", "started_at_display",
              "finished_at_display", "duration_display", "token", "lock_lost", "manual", "catch_up", "backfill",
              "fired_count", "fired_by_display", "task_id", "error_display")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobRun]:
        return with_utc_times(super().get_queryset(request), ("fire_time", "started_at", "finished_at"))

    # Times with seconds (Django's default format stops at minutes; ticks can be seconds apart).
    fire_time_display = seconds_column("fire_time", "fire time")
    started_at_display = seconds_column("started_at", "started at")
    finished_at_display = seconds_column("finished_at", "finished at", empty="-")

    @admin.display(description="duration", ordering=F("finished_at") - F("started_at"))
    def duration_display(self, obj: JobRun) -> str:
        return format_duration(obj.duration) or "-"

    @admin.display(description="fired by")
    def fired_by_display(self, obj: JobRun) -> str:
        """Every instance that fired this tick and how late (one row per tick: the others' fires are folded in)."""
        return ", ".join(f"{instance} {late}" for instance, late in obj.fires) or "-"

    @admin.display(description="error")
    def error_display(self, obj: JobRun) -> str:
        return error_block(obj.error)
