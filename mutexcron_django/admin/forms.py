"""The forms of the Locks page's control actions: a pause's end (a time or a duration) and a schedule override
(a spec checked by mutexcron's own parser, and an optional time zone)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django import forms
from django.contrib.admin import widgets
from django.utils import timezone as dj_timezone

from mutexcron import Job
from mutexcron.cli import parse_duration
from mutexcron.cron import CronTrigger, parse_cron, resolve_timezone
from mutexcron.errors import CronSpecError
from mutexcron.ops.control import checked_override
from mutexcron.stores.base import MAX_PAUSE_NOTE

from .schedules import describe, next_fires


class PauseForm(forms.Form):
    """How long a pause lasts: until a date-time, for a duration such as ``2h30m``, or until resumed."""

    until = forms.SplitDateTimeField(
        required=False, widget=widgets.AdminSplitDateTime,
        help_text="The pause ends by itself at this time (in the admin's time zone).")
    duration = forms.CharField(
        required=False, max_length=32, label="For",
        help_text="Or a duration such as 90s, 15m, 2h30m or 1d. Leave both empty to pause until resumed.")
    note = forms.CharField(
        required=False, max_length=MAX_PAUSE_NOTE, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Why: kept with the pause until it is lifted, shown in the list of locks and by mutexcron list.")

    def clean_duration(self) -> timedelta | None:
        text = str(self.cleaned_data.get("duration") or "").strip()
        if not text:
            return None
        try:
            return parse_duration(text)
        except argparse.ArgumentTypeError as error:
            raise forms.ValidationError(str(error)) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        until, duration = data.get("until"), data.get("duration")
        if until is not None and duration is not None:
            raise forms.ValidationError("Give an end time or a duration, not both.")
        if until is not None and until <= dj_timezone.now():
            self.add_error("until", "This time has already passed.")
        return data

    def end(self, now: datetime) -> datetime | None:
        """When the pause ends (aware), or None: until resumed."""
        until: datetime | None = self.cleaned_data.get("until")
        duration: timedelta | None = self.cleaned_data.get("duration")
        if duration is not None:
            return now + duration
        if until is not None and dj_timezone.is_naive(until):
            until = dj_timezone.make_aware(until)
        return until


class ScheduleForm(forms.Form):
    """A schedule override for one job: the spec (5 fields, or 6 with seconds first) and an optional zone."""

    spec = forms.CharField(
        max_length=255, label="Cron spec",
        widget=forms.TextInput(attrs={"size": 30, "autocomplete": "off", "spellcheck": "false"}),
        help_text="Five fields (minute hour day month weekday), or six with seconds first.")
    timezone = forms.CharField(
        required=False, max_length=64, label="Time zone",
        help_text="An IANA name such as Europe/Paris; empty: the job's own zone.")

    def __init__(self, *args: Any, job: Job, default_zone: tzinfo, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job, self.default_zone = job, default_zone

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        spec = data.get("spec")
        if spec is None:
            return data
        try:
            data["spec"], data["timezone"] = checked_override(self.job.name, spec, data.get("timezone") or None)
        except CronSpecError as error:
            field = "timezone" if "timezone" in str(error) else "spec"
            self.add_error(field, str(error))
        return data

    def trigger(self) -> CronTrigger | None:
        """The trigger of the valid spec and zone; None while the form has errors."""
        if not self.is_valid():
            return None
        zone = self.cleaned_data["timezone"]
        return CronTrigger(parse_cron(self.cleaned_data["spec"]),
                           resolve_timezone(zone) if zone else self.job.timezone or self.default_zone)

    def preview(self, after: datetime) -> tuple[str, list[str]]:
        """The valid spec in plain words and its next five fires in its zone; ("", []) while invalid."""
        trigger = self.trigger()
        if trigger is None:
            return "", []
        return describe(self.cleaned_data["spec"]), next_fires(trigger, after)
