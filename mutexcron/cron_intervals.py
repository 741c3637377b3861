"""The shortest interval between two ticks of a cron spec, worked out from its parsed fields, and the bound it
puts on a job's ``jitter``: a tick delayed by at least that much could run after the next tick, which takes the
lock first and makes the earlier one count as already run everywhere (it would be lost)."""

from __future__ import annotations

import calendar
import functools
from datetime import date, timedelta
from itertools import pairwise

from .cron import CronSpec

__all__ = ["check_jitter", "shortest_interval"]

_DAY = 86_400  # seconds
# The Gregorian calendar, weekdays included, repeats every 400 years (146,097 days, a whole number of weeks):
# the gaps between matching dates over 401 years are every gap there is (the 401st pairs the cycle's last date
# with the next cycle's first).
_CYCLE = range(2000, 2401)


def shortest_interval(spec: CronSpec) -> timedelta:
    """The shortest time between two consecutive ticks of ``spec``, on the wall clock.

    Exact: the times of day it fires (seconds within minutes within hours) and the closest two days it fires
    on. A daylight saving change can bring two ticks closer than this once (a wall time it skips fires shifted
    past the change), which the wall clock does not see."""
    first, last, within_a_day = 0, 0, None  # seconds of the day of the first and last fire, shortest gap between
    for values, unit in ((spec.seconds, 1), (spec.minutes, 60), (spec.hours, 3600)):
        gaps = [(later - earlier) * unit - (last - first) for earlier, later in pairwise(values)]
        if within_a_day is not None:
            gaps.append(within_a_day)
        first, last, within_a_day = values[0] * unit + first, values[-1] * unit + last, min(gaps, default=None)
    if within_a_day is not None and within_a_day <= _DAY - (last - first):
        return timedelta(seconds=within_a_day)  # no two days are closer than one
    days = _closest_days(spec.days, spec.months, spec.weekdays, spec.days_restricted, spec.weekdays_restricted)
    across = days * _DAY - (last - first)  # the last fire of a day to the first of the next day it fires on
    return timedelta(seconds=across if within_a_day is None else min(within_a_day, across))


def check_jitter(job_name: str, spec: CronSpec, jitter: timedelta, *, error: type[Exception],
                 what: str = "schedule") -> None:
    """Raise ``error`` naming the job, the jitter and the interval unless ``jitter`` is below ``spec``'s
    shortest interval between ticks."""
    if jitter <= timedelta(0):
        return
    interval = shortest_interval(spec)
    if jitter >= interval:
        raise error(f"job {job_name!r}: jitter {jitter} must be below the shortest interval between the ticks of "
                    f"its {what} {spec.expression!r}, {interval}: a tick delayed that much could run after the next "
                    "one and be lost")


@functools.lru_cache(maxsize=256)
def _closest_days(days: tuple[int, ...], months: tuple[int, ...], weekdays: tuple[int, ...],
                  days_restricted: bool, weekdays_restricted: bool) -> int:
    """The fewest days between two consecutive dates the day fields match (see CronSpec for the OR rule)."""
    if weekdays_restricted and not days_restricted and len(months) == 12:  # those weekdays, every week
        return min(later - earlier for earlier, later in pairwise((*weekdays, weekdays[0] + 7)))
    closest, previous = None, None
    for year in _CYCLE:
        for month in months:
            start_weekday, length = calendar.monthrange(year, month)  # Monday 0; cron's weekdays start on Sunday
            matching = set(days) if days_restricted else set() if weekdays_restricted else set(range(1, 32))
            if weekdays_restricted:
                matching.update(day for day in range(1, length + 1) if (start_weekday + day) % 7 in weekdays)
            first_of_month = date(year, month, 1).toordinal() - 1
            for day in sorted(day for day in matching if day <= length):
                if previous is not None:
                    gap = first_of_month + day - previous
                    closest = gap if closest is None else min(closest, gap)
                    if closest == 1:
                        return 1
                previous = first_of_month + day
    assert closest is not None, "parse_cron refuses a spec that never fires"
    return closest
