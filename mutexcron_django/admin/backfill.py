"""The Locks page's backfill action: its form (a range read as ``mutexcron backfill`` reads it, its ticks counted,
and a range of too many, or ending after the store's now, refused on the form) and the background thread of the
web process that runs it."""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

from django import forms
from django.db import connections

from mutexcron import Job
from mutexcron.cli import UsageError, parse_time
from mutexcron.cron import CronTrigger
from mutexcron.errors import JobDefinitionError
from mutexcron.scheduling.backfill import backfill_ticks

from .. import runtime

__all__ = ["BackfillForm", "start_backfill"]

logger = logging.getLogger("mutexcron.django")


class BackfillForm(forms.Form):
    """The range of ticks to backfill: from (included) and to (excluded), ISO-8601, in the job's zone unless
    they give an offset."""

    start = forms.CharField(max_length=64, label="From", widget=forms.TextInput(attrs={"autocomplete": "off"}),
                            help_text="Included. ISO-8601 such as 2030-01-31T00:00 (or with an offset, +01:00).")
    end = forms.CharField(max_length=64, label="To", widget=forms.TextInput(attrs={"autocomplete": "off"}),
                          help_text="Excluded. Times without an offset are read in the job's zone.")

    def __init__(self, *args: Any, job: Job, trigger: CronTrigger, now: datetime, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job, self.trigger, self.now = job, trigger, now  # now: the lock store's clock
        self.ticks: list[datetime] = []

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "start" not in data or "end" not in data:
            return data
        zone = self.trigger.timezone
        try:
            data["start"] = parse_time(data["start"], zone, "From")
            data["end"] = parse_time(data["end"], zone, "To")
            self.ticks = backfill_ticks(self.job.name, self.trigger, data["start"], data["end"], self.now)
        except (UsageError, JobDefinitionError) as error:
            raise forms.ValidationError(str(error)) from None
        if not self.ticks:
            raise forms.ValidationError(f"No tick of {self.trigger} falls in this range; nothing to backfill.")
        return data


def start_backfill(name: str, start: datetime, end: datetime, by: str | None) -> threading.Thread:
    """Backfill job ``name`` in a daemon thread of this process (a scheduler built from the settings, with the
    run history and signals); the result is logged."""
    def run() -> None:
        try:
            scheduler = runtime.build_scheduler()
            try:
                ran = scheduler.backfill(name, start, end, by=by)
            finally:
                scheduler.shutdown()
            logger.info("backfill of job %r from %s to %s by %s: ran %d tick(s)", name, start.isoformat(),
                        end.isoformat(), by, ran)
        except Exception:
            logger.exception("backfill of job %r from %s to %s by %s failed", name, start.isoformat(),
                             end.isoformat(), by)
        finally:
            connections.close_all()  # this thread's own

    thread = threading.Thread(target=run, name=f"mutexcron-backfill-{name}", daemon=True)
    thread.start()
    return thread
