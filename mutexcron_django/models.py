"""The app's tables: one lock row per job, and the run history of every instance."""

from __future__ import annotations

from django.db import models


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

    class Meta:
        verbose_name = "lock"
        ordering = ["name"]
        permissions = [("force_unlock_lock", "Can force-unlock a job's lock")]

    def __str__(self) -> str:
        return self.name


class JobRun(models.Model):
    """One RunRecord: a fire of a job on one instance, run or skipped."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED_BUSY = "skipped_busy"
        SKIPPED_ALREADY_RAN = "skipped_already_ran"
        SKIPPED_STORE_ERROR = "skipped_store_error"

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

    class Meta:
        verbose_name = "job run"
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["job_name", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.job_name} @ {self.fire_time:%Y-%m-%d %H:%M:%S} on {self.instance_id}: {self.outcome}"

    @property
    def duration(self):  # type: ignore[no-untyped-def]
        return self.finished_at - self.started_at if self.finished_at else None
