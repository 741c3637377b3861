"""A job's schedule as the admin shows it: the effective spec (the store's override or the code's) in plain
words, its zone and its next fires; and a pause in one line."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, tzinfo
from itertools import islice

from cron_descriptor import Options, get_description

from mutexcron.cron import MACROS, SPECS_KEPT, CronTrigger, iter_fire_times
from mutexcron.ops.listing import JobLine
from mutexcron.stores import LockState

from .display import show_time, zone_name

PREVIEW_COUNT = 5


@functools.lru_cache(maxsize=SPECS_KEPT)
def describe(spec: str) -> str:
    """``spec`` in plain English (cron-descriptor; six fields are seconds first, as in mutexcron); "" if it cannot.
    Kept per spec: a page of many jobs shares few specs, and cron-descriptor reads its catalogue at each call."""
    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(get_description(MACROS.get(spec.strip().lower(), spec), options))
    except Exception:  # cron-descriptor's own errors; mutexcron's parser is the judge of a spec
        return ""


def next_fires(trigger: CronTrigger, after: datetime, count: int = PREVIEW_COUNT) -> list[str]:
    """The trigger's next ``count`` fires after ``after``, shown in its zone."""
    return [show_time(fire, trigger.timezone) for fire in islice(iter_fire_times(trigger, after), count)]


@dataclass
class JobSchedule:
    """What a job fires on now: ``spec`` in ``zone``, overriding ``code_spec`` if ``overridden``."""

    spec: str
    code_spec: str
    zone: tzinfo
    overridden: bool
    version: int
    trigger: CronTrigger
    error: str = ""  # the stored override could not be read; the code's schedule is shown

    @property
    def description(self) -> str:
        return describe(self.spec)

    @property
    def zone_name(self) -> str:
        return zone_name(self.zone)

    def fires(self, after: datetime, count: int = PREVIEW_COUNT) -> list[str]:
        return next_fires(self.trigger, after, count)


def job_schedule(line: JobLine) -> JobSchedule:
    """The schedule a job fires on, from its line of a listing (the code's, with ``error``, if the store's
    override cannot be read)."""
    version = line.state.schedule_version if line.state is not None else 0
    return JobSchedule(line.spec, line.job.spec.expression, line.zone, line.overridden, version, line.trigger,
                       error=line.error or "")


def paused_line(state: LockState | None, now: datetime) -> str:
    """"Paused since …, by …, until …: note" for a job paused at ``now``; "" otherwise."""
    if state is None or not state.is_paused(now):
        return ""
    since = f" since {show_time(state.paused_at)}" if state.paused_at is not None else ""
    who = state.paused_by or "an unknown operator"
    until = f"until {show_time(state.paused_until)}" if state.paused_until else "until resumed"
    note = f": {state.pause_note}" if state.pause_note else ""
    return f"Paused{since}, by {who}, {until}{note}"
