"""The app's tables: one lock row per job, and the run history of every instance."""

from __future__ import annotations

from django.db import models

from .sql.clock import aware


class Lock(models.Model):
    """A job's lock document, the same fields as in the Redis and MongoDB stores."""

    name = models.CharField(primary_key=True, max_length=200)
    locked = models.BooleanField(default=False)
    locked_by = models.CharField(max_length=255, null=True, blank=True)
    last_locked_at = models.DateTimeField(null=True, blank=True)
    last_released_at = models.DateTimeField(null=True, blank=True)
    lock_until = models.DateTimeField(null=True, blank=True)
    last_fire_time = models.DateTimeField(null=True, blank=True)
    token = models.BigIntegerField(default=0)
    tick_token = models.BigIntegerField(default=0, help_text="the acquire's token while its run holds the lock")
    deleted = models.BooleanField(default=False, help_text="a tombstone: hidden, keeps its token and last fire")
    # Run-time control by operators (see mutexcron.stores.base.LockState): a pause, a schedule override.
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True, help_text="the pause ends by itself then")
    paused_by = models.CharField(max_length=255, null=True, blank=True)
    pause_note = models.TextField(null=True, blank=True, help_text="the operator's note given with the pause")
    resumed_at = models.DateTimeField(null=True, blank=True)
    schedule = models.CharField(max_length=255, null=True, blank=True, help_text="cron spec overriding the code's")
    schedule_timezone = models.CharField(max_length=64, null=True, blank=True)
    schedule_version = models.BigIntegerField(default=0, help_text="bumped by every schedule change")
    schedule_by = models.CharField(max_length=255, null=True, blank=True)
    schedule_changed_at = models.DateTimeField(null=True, blank=True)
    # What the runs left, for alerts (mutexcron.ops.alerts): written by release(outcome=...); the open incident.
    created_at = models.DateTimeField(null=True, blank=True, help_text="when the row was first made")
    last_outcome = models.CharField(max_length=16, null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(null=True, blank=True, help_text="the failed run's error, one line")
    failures = models.IntegerField(default=0, help_text="failed (or timed-out) runs in a row")
    incident = models.CharField(max_length=255, null=True, blank=True, help_text="the open alert")
    incident_at = models.DateTimeField(null=True, blank=True)
    definition = models.TextField(null=True, blank=True, help_text="a run-time schedule's definition (JSON)")
    # The overlap policies' state (docs/overlap.md): the next tick slot and the stop request.
    next_fire = models.DateTimeField(null=True, blank=True, help_text="the tick the overlap slot holds")
    next_until = models.DateTimeField(null=True, blank=True, help_text="the overlap slot is live until then")
    stop_token = models.BigIntegerField(default=0, help_text="the token whose holder is asked to stop")
    revision = models.PositiveBigIntegerField(default=0, help_text="bumped by every write (the control plane's "
                                                                   "compare-and-set)")

    class Meta:
        verbose_name = "lock"
        ordering = ["name"]
        permissions = [
            ("force_unlock_lock", "Can force-unlock a job's lock"),
            ("pause_lock", "Can pause and resume a job"),
            ("retime_lock", "Can re-time a job (override its schedule)"),
        ]

    def __str__(self) -> str:
        return self.name


class Schedule(Lock):
    """A run-time schedule (``Scheduler.add_schedule``): a lock document with a definition. A proxy model, so that
    the admin has its page and Django its permissions (``add_schedule``, ``change_schedule``, ``delete_schedule``,
    ``view_schedule``: none shares a codename with Lock's); the admin reads and writes the configured store, never
    this model's rows."""

    class Meta:
        proxy = True
        verbose_name = "run-time schedule"


class JobRun(models.Model):
    """A job's run history: ONE row per scheduled tick (its run, with the other instances' fires folded in:
    ``fired_count`` and ``fired_by``), and a row of its own for each manual run and each fire skipped for
    another reason (busy, store error, stale schedule). See :mod:`mutexcron_django.history`."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED_BUSY = "skipped_busy"
        SKIPPED_ALREADY_RAN = "skipped_already_ran"
        SKIPPED_STORE_ERROR = "skipped_store_error"
        SKIPPED_PAUSED = "skipped_paused"
        SKIPPED_STALE_SCHEDULE = "skipped_stale_schedule"
        ENQUEUED = "enqueued"  # run_on="tasks": handed to a task worker, whose run then takes the row over
        TIMED_OUT = "timed_out"
        REPLACED = "replaced"
        SKIPPED_LATE = "skipped_late"

    job_name = models.CharField(max_length=200, db_index=True)
    fire_time = models.DateTimeField()
    instance_id = models.CharField(max_length=255)
    outcome = models.CharField(max_length=32, choices=Outcome.choices)
    started_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    token = models.BigIntegerField(null=True, blank=True)
    lock_lost = models.BooleanField(default=False)
    manual = models.BooleanField(default=False)
    catch_up = models.BooleanField(default=False)
    backfill = models.BooleanField(default=False, help_text="run by a backfill (an operator's range of ticks)")
    # One row per tick: "<job>@<fire time, UTC ISO>" on the row of a scheduled tick (unique: the fold's key);
    # NULL on manual runs, own-row skips and rows written before it existed.
    tick_key = models.CharField(max_length=255, null=True, blank=True, unique=True)
    fired_count = models.PositiveIntegerField(default=1, help_text="how many fires of instances this row holds")
    fired_by = models.TextField(blank=True, default="", help_text="each fire: instance and lateness, one a line")
    task_id = models.CharField(max_length=64, null=True, blank=True,
                               help_text="the task that ran the body on a worker (run_on='tasks')")

    class Meta:
        verbose_name = "job run"
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["job_name", "-started_at"]),
                   models.Index(fields=["job_name", "fire_time"], name="mutexcron_jobrun_tick_idx")]

    def __str__(self) -> str:
        fire_time = aware(getattr(self, "utc_fire_time", self.fire_time))  # as the admin reads it, in UTC
        return f"{self.job_name} @ {fire_time:%Y-%m-%d %H:%M:%S} on {self.instance_id}: {self.outcome}"

    @property
    def duration(self):  # type: ignore[no-untyped-def]
        return self.finished_at - self.started_at if self.finished_at else None

    @property
    def fires(self) -> list[tuple[str, str]]:
        """(instance, lateness such as "+0.012s") of each fire folded into this row, in the order written."""
        pairs = (line.rpartition(" ") for line in self.fired_by.splitlines() if line.strip())
        return [(instance, lateness) for instance, _, lateness in pairs]


class PauseSpan(models.Model):
    """One episode of a pause as the schedulers met it: the first and the last tick an operator's pause
    skipped (``skipped_paused`` fires are not written to JobRun; later ones move ``ended_at``)."""

    job_name = models.CharField(max_length=200)
    started_at = models.DateTimeField(help_text="the first tick the pause skipped")
    ended_at = models.DateTimeField(help_text="the last tick the pause skipped (so far)")

    class Meta:
        verbose_name = "pause span"
        constraints = [models.UniqueConstraint(fields=["job_name", "started_at"], name="mutexcron_pausespan_once")]

    def __str__(self) -> str:
        return f"{self.job_name} paused {self.started_at.isoformat()} .. {self.ended_at.isoformat()}"


class ScheduledTask(models.Model):
    """A delayed one-off task of ``TaskQueue("django://")`` (see ``mutexcron_django.sql.tasks.backend``).

    ``due`` is when it may run next (its ``run_at``, or a retry's time); ``claim_token`` is the token of
    the worker's claim that holds it while ``running``, until ``visible_until`` (database clock).
    """

    class Status(models.TextChoices):
        SCHEDULED = "scheduled"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    id = models.CharField(primary_key=True, max_length=64)
    task_type = models.CharField(max_length=100)
    payload = models.TextField(help_text="JSON")
    run_at = models.DateTimeField(help_text="when it was scheduled to run")
    due = models.DateTimeField(help_text="when it may run next (a retry moves it)")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    attempts = models.IntegerField(default=0)
    claims = models.BigIntegerField(default=0, help_text="how many times a worker claimed it")
    claim_token = models.CharField(max_length=64, null=True, blank=True)
    claimed_by = models.CharField(max_length=255, null=True, blank=True)
    visible_until = models.DateTimeField(null=True, blank=True, help_text="a running claim expires then")
    error = models.TextField(null=True, blank=True)
    result = models.TextField(null=True, blank=True, help_text="what the handler left (django.tasks results)")
    trace_context = models.TextField(null=True, blank=True, help_text="W3C trace context of schedule() (JSON)")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "scheduled task"
        indexes = [
            models.Index(fields=["status", "task_type", "due"], name="mutexcron_task_claim_idx"),
            models.Index(fields=["status", "visible_until"], name="mutexcron_task_visible_idx"),
            models.Index(fields=["status", "finished_at"], name="mutexcron_task_finished_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.task_type} {self.id} ({self.status})"


class TaskMark(models.Model):
    """A task's record beside a message broker (RabbitMQ): status, attempts, generation, cancel mark.

    See ``mutexcron.tasks.records.base`` and ``mutexcron_django.sql.tasks.records``. A row whose
    ``expires_at`` has passed counts as absent (and is pruned); NULL never expires (a failed task).
    """

    id = models.CharField(primary_key=True, max_length=64)
    task_type = models.CharField(max_length=100)
    payload = models.TextField(help_text="JSON")
    run_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=ScheduledTask.Status.choices)
    attempts = models.IntegerField(default=0)
    gen = models.IntegerField(default=1)
    error = models.TextField(null=True, blank=True)
    result = models.TextField(null=True, blank=True, help_text="what the handler left (django.tasks results)")
    trace_context = models.TextField(null=True, blank=True, help_text="W3C trace context of schedule() (JSON)")
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "task mark"
        # pending_counts(): the scheduled records by type, one GROUP BY on this index
        indexes = [models.Index(fields=["status", "task_type"], name="mutexcron_taskmark_status_idx")]

    def __str__(self) -> str:
        return f"{self.task_type} {self.id} ({self.status}, generation {self.gen})"
