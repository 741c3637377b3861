"""Cron expressions: parse standard cron (5 or 6 fields) and turn them into APScheduler triggers.

APScheduler does the matching and the waiting. This module only translates standard cron into its
terms (0 and 7 are Sunday, the day-of-month/day-of-week OR rule) and maps local wall-clock times to
instants so that DST changes neither repeat nor drop a fire (see :class:`CronTrigger`).
"""

from __future__ import annotations

import calendar
import functools
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TypedDict

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger as _APSCronTrigger

from .errors import CronSpecError
from .zones import fixed_offset, native_zone, resolve_timezone, wall_offsets

__all__ = ["MACROS", "CronSpec", "CronTrigger", "iter_fire_times", "next_fire_times", "parse_cron", "resolve_timezone"]

_ONE_MICROSECOND = timedelta(microseconds=1)
_ZERO = timedelta(0)
# No spring-forward gap in the tz database is longer than a day (Samoa skipped 2011-12-30 whole).
_LONGEST_GAP = timedelta(days=1)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {name: i for i, name in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], start=1)}
_WEEKDAY_NAMES = {name: i for i, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
# APScheduler's own weekday numbers start at Monday; naming the days avoids any numbering.
_APS_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DAY = _Field("day of month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTH_NAMES)
_WEEKDAY = _Field("day of week", 0, 7, _WEEKDAY_NAMES)
_FIELDS = (_SECOND, _MINUTE, _HOUR, _DAY, _MONTH, _WEEKDAY)

_ITEM = re.compile(r"^(?P<start>\*|[0-9a-z]+)(?:-(?P<end>[0-9a-z]+))?(?:/(?P<step>[0-9]+))?$")


@dataclass(frozen=True)
class CronSpec:
    """A validated cron expression, each field expanded to the sorted values it allows.

    ``weekdays`` uses cron numbering (0 = Sunday ... 6 = Saturday; a 7 in the text becomes 0).
    ``days_restricted`` and ``weekdays_restricted``: whether the day field takes part in the OR rule (when
    both do, a day matches if either matches); see :func:`_restricts`.
    """

    expression: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    days_restricted: bool
    weekdays_restricted: bool

    def __str__(self) -> str:
        return self.expression


class _SpecProblem(Exception):
    """Internal: one field's problem, turned into a CronSpecError with the job's name added."""

    def __init__(self, field: str, value: str, reason: str) -> None:
        super().__init__(field, value, reason)
        self.field, self.value, self.reason = field, value, reason


def parse_cron(expression: str, *, job_name: str | None = None) -> CronSpec:
    """Parse a 6-field (``sec min hour dom month dow``) or 5-field cron expression or a macro; a
    :class:`CronSpecError` names the job, the field and the bad value."""
    try:
        if not isinstance(expression, str):
            raise CronSpecError(f"cron expression must be a string, not {type(expression).__name__} ({expression!r})")
        return _parsed(" ".join(expression.split()))
    except CronSpecError as problem:  # what is wrong with the spec, said of its job
        raise CronSpecError(f"{f'job {job_name!r}' if job_name else 'cron expression'}: {problem}") from None


# Distinct specs kept parsed, and their APScheduler triggers built: many jobs share few specs, and each is parsed
# and compiled once, not once per job, zone and start (APScheduler compiles every field each time).
SPECS_KEPT = 4096


@functools.lru_cache(maxsize=SPECS_KEPT)
def _parsed(text: str) -> CronSpec:
    """The spec of a whitespace-normalised expression (immutable: one serves every job); CronSpecError."""
    if not text:
        raise CronSpecError("cron expression is empty")
    if text.startswith("@"):
        macro = MACROS.get(text.lower())
        if macro is None:
            raise CronSpecError(f"unknown cron macro {text!r}; use one of {', '.join(MACROS)}")
        parts = ["0", *macro.split()]
    else:
        parts = text.split(" ")
        if len(parts) == 5:
            parts = ["0", *parts]
        elif len(parts) != 6:
            raise CronSpecError(f"cron expression {text!r} has {len(parts)} fields; expected 5 (min hour dom month "
                                "dow) or 6 (sec min hour dom month dow)")
    try:
        values = [_expand(field, part) for field, part in zip(_FIELDS, parts, strict=True)]
    except _SpecProblem as problem:
        raise CronSpecError(f"cron field {problem.field!r} has bad value {problem.value!r} in {text!r}: "
                            f"{problem.reason}") from None
    seconds, minutes, hours, days, months, cron_weekdays = values
    weekdays = tuple(sorted({day % 7 for day in cron_weekdays}))
    days_restricted = _restricts(parts[3], days, 31, other=parts[5])
    spec = CronSpec(text, seconds, minutes, hours, days, months, weekdays, days_restricted,
                    _restricts(parts[5], weekdays, 7, other=parts[3]))
    if spec.days_restricted and not spec.weekdays_restricted and not _possible_days(spec):
        raise CronSpecError(f"cron field {_DAY.name!r} has value {parts[3]!r} that no month in {parts[4]!r} has, "
                            f"so {text!r} never fires")
    return spec


def _restricts(text: str, values: tuple[int, ...], every: int, *, other: str) -> bool:
    """Whether a day field takes part in the day-of-month/day-of-week OR rule, as croniter decides: unless it
    is ``*``, yes, even when it allows every day (``1-31``, ``0-6``), but not then if the other has a ``*``."""
    return text != "*" and not (len(values) == every and "*" in other)


def _possible_days(spec: CronSpec) -> tuple[int, ...]:
    """The days of month in ``spec.days`` that some month in ``spec.months`` has (February 29 included)."""
    longest_month = max(29 if month == 2 else calendar.monthrange(2001, month)[1] for month in spec.months)
    return tuple(day for day in spec.days if day <= longest_month)


def _expand(field: _Field, text: str) -> tuple[int, ...]:
    """Expand one field's text; problems name the item as written (original case)."""
    if text == "":
        raise _SpecProblem(field.name, text, "empty field")
    allowed: set[int] = set()
    for item in text.split(","):
        match = _ITEM.match(item.lower())
        if not match:
            raise _SpecProblem(field.name, item or text, "expected *, a number, a range a-b, a list a,b or a step */n")
        start_text, end_text, step_text = match.group("start", "end", "step")
        if start_text == "*":
            if end_text is not None:
                raise _SpecProblem(field.name, item, "'*' cannot start a range")
            start, end = field.low, field.high
        else:
            start = _value(field, start_text, item)
            end = _value(field, end_text, item) if end_text is not None else (
                field.high if step_text is not None else start)
            if field is _WEEKDAY and end_text is None and step_text is not None:  # a/n: from a (7 is Sunday, 0)
                start, end = start % 7, 6  # to Saturday, as in croniter and Vixie cron: "wed/2" is Wed, Fri
            if end < start:
                raise _SpecProblem(field.name, item, f"range is reversed ({start} > {end})")
        step = 1
        if step_text is not None:
            step = _number(step_text, field, item, "step")
            if not 1 <= step <= field.high:
                raise _SpecProblem(field.name, item, f"step must be between 1 and {field.high}")
        allowed.update(range(start, end + 1, step))
    return tuple(sorted(allowed))


def _number(text: str, field: _Field, item: str, what: str) -> int:
    """The number ``text`` (ASCII digits); one too long for any field is out of range, before ``int()``
    (which refuses more than 4300 digits with a plain ValueError)."""
    if len(text.lstrip("0")) > 100:
        raise _SpecProblem(field.name, item, f"{what} {text[:12]}… ({len(text)} digits) is too large "
                                             f"(at most {field.high})")
    return int(text)


def _value(field: _Field, text: str, item: str) -> int:
    if text.isdigit():
        number = _number(text, field, item, "value")
    elif field.names is not None and text in field.names:
        number = field.names[text]
    else:
        kind = f"a number or a name like {next(iter(field.names))!r}" if field.names else "a number"
        raise _SpecProblem(field.name, item, f"{text!r} is not {kind}")
    if not field.low <= number <= field.high:
        raise _SpecProblem(field.name, item, f"{number} is outside {field.low}-{field.high}")
    return number


def _compact(values: tuple[int, ...], low: int, high: int) -> str:
    """Write a value set the way APScheduler reads it: ``*`` or ranges and single values."""
    if values == tuple(range(low, high + 1)):
        return "*"
    runs: list[str] = []
    run_start = previous = values[0]
    for value in (*values[1:], None):
        if value is not None and value == previous + 1:
            previous = value
            continue
        runs.append(str(run_start) if run_start == previous else f"{run_start}-{previous}")
        if value is not None:
            run_start = previous = value
    return ",".join(runs)


class _TimeFields(TypedDict):
    """The APScheduler cron fields other than the two day fields, in APScheduler's syntax."""

    second: str
    minute: str
    hour: str
    month: str


def _utcoffset(moment: datetime) -> timedelta:
    """The UTC offset of an aware datetime (zero for a zone that gives none, as :meth:`CronTrigger._offsets`)."""
    return moment.utcoffset() or _ZERO


@functools.lru_cache(maxsize=SPECS_KEPT)
def _wall_trigger(spec: CronSpec) -> BaseTrigger:
    """APScheduler's trigger over wall-clock time (as if it were UTC) matching ``spec``'s fields; stateless, so
    every CronTrigger of one spec shares it, whatever its zone."""
    fields: _TimeFields = {
        "second": _compact(spec.seconds, 0, 59),
        "minute": _compact(spec.minutes, 0, 59),
        "hour": _compact(spec.hours, 0, 23),
        "month": _compact(spec.months, 1, 12),
    }
    days = _compact(spec.days, 1, 31)
    weekdays = "*" if not spec.weekdays_restricted else ",".join(_APS_WEEKDAYS[d] for d in spec.weekdays)
    if not (spec.days_restricted and spec.weekdays_restricted):
        return _APSCronTrigger(day=days, day_of_week=weekdays, timezone=UTC, **fields)
    # Classic cron: when both day fields are restricted, a day matches if either matches.
    by_weekday = _APSCronTrigger(day="*", day_of_week=weekdays, timezone=UTC, **fields)
    possible_days = _possible_days(spec)
    if not possible_days:
        # Days no allowed month has (``30 2``) never match; APScheduler would search every year up to 9999 for
        # them on each call, so leave that half out.
        return by_weekday
    return OrTrigger([_APSCronTrigger(day=_compact(possible_days, 1, 31), day_of_week="*", timezone=UTC, **fields),
                      by_weekday])


class CronTrigger(BaseTrigger):
    """An APScheduler trigger for a :class:`CronSpec` in a time zone, correct across DST changes.

    APScheduler's own cron trigger matches the fields; we run it over *wall-clock* time (as if it
    were UTC) and map each matching wall time to one instant. Each matching wall time fires once:
    a time repeated when clocks go back fires at its first occurrence only; a time skipped when
    clocks go forward fires shifted by the gap (01:30 during a 01:00->02:00 jump fires at 02:30),
    and never twice if that instant also matches on its own.
    """

    def __init__(self, spec: CronSpec, timezone: tzinfo = UTC) -> None:
        self.spec = spec
        self.timezone = native_zone(timezone)  # a pytz zone: the ZoneInfo of its name
        self._fixed = fixed_offset(self.timezone)  # a zone without changes: the fire after an instant is arithmetic
        self._last: tuple[datetime, datetime | None] | None = None  # the last (previous fire, next fire) answered
        self._minute: datetime | None = None  # a naive wall minute all fields but the second match (the last found)
        self._wall = _wall_trigger(spec)

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        """The first fire strictly after ``previous_fire_time``, or at/after ``now`` when there is none.

        APScheduler asks twice per fire with the same previous fire time object (for the run times, then for the
        next run): the second is answered from the first (by identity: equal aware times may differ in fold)."""
        if previous_fire_time is None:
            return self.next_after(now - _ONE_MICROSECOND)
        last = self._last  # one tuple, read once: safe beside another thread's write
        if last is not None and last[0] is previous_fire_time:
            return last[1]
        fire = self.next_after(previous_fire_time)
        self._last = (previous_fire_time, fire)
        return fire

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire time strictly after the aware datetime ``instant``, in this trigger's zone.

        Each matching wall time fires at its ``fold=0`` instant; the answer is the earliest of those after
        ``instant``. Wall times after ``instant``'s own map to later instants, with two exceptions: a
        repeated hour's wall times fire at their first pass (maybe before ``instant``), and wall times
        skipped by a gap fire shifted past it (maybe after later wall times, when the gap is not a whole
        multiple of the schedule's period, e.g. Lord Howe's 30-minute change).
        """
        instant_utc = instant.astimezone(UTC)
        naive_utc = instant_utc.replace(tzinfo=None)
        if self._fixed is not None:  # the first wall match after instant's own wall time (the hot path: UTC)
            match = self._next_wall_match(naive_utc + self._fixed)
            return None if match is None else (match - self._fixed).replace(tzinfo=UTC).astimezone(self.timezone)
        fire = self._first_fire_after_wall(naive_utc + _utcoffset(instant_utc.astimezone(self.timezone)), instant_utc)
        # Shortly after a spring-forward gap, wall times skipped by it (before `instant`'s own wall time)
        # may still fire after `instant`: search them from where `instant` falls in the gap.
        earlier = instant_utc - _LONGEST_GAP if instant_utc.year > 1 else instant_utc
        in_gap = naive_utc + _utcoffset(earlier.astimezone(self.timezone))
        if self._is_skipped(in_gap):
            candidate = self._next_wall_match(in_gap)
            if candidate is not None and self._is_skipped(candidate):
                shifted = self._instant(candidate)
                if shifted > instant_utc and (fire is None or shifted < fire):
                    fire = shifted
        return None if fire is None else fire.astimezone(self.timezone)

    def _first_fire_after_wall(self, wall: datetime, instant_utc: datetime) -> datetime | None:
        """The first fire after ``instant_utc`` of the wall times after ``wall``, ``instant_utc``'s own."""
        naive_utc = instant_utc.replace(tzinfo=None)
        while True:
            candidate = self._next_wall_match(wall)
            if candidate is None:
                return None
            before, after = self._offsets(candidate)
            fire = (candidate - before).replace(tzinfo=UTC)  # self._instant(candidate), offsets read once
            if before < after:  # self._is_skipped(candidate)
                # It fires shifted past the gap; a wall time just after the gap may fire before that.
                end_of_gap = self._end_of_change(candidate)
                after_gap = self._next_wall_match(end_of_gap - _ONE_MICROSECOND)
                if after_gap is not None and not self._is_skipped(after_gap):
                    fire = min(fire, self._instant(after_gap))
                return fire
            if fire > instant_utc:
                return fire
            # A repeated wall time whose first pass is not after `instant`: so is every wall time up to
            # `instant` + the first pass's offset, but only until the repeated hour ends.
            skip_to = min(naive_utc + self._offsets(candidate)[0], self._end_of_change(candidate) - _ONE_MICROSECOND)
            wall = max(candidate, skip_to)

    def _next_wall_match(self, wall: datetime) -> datetime | None:
        """The first wall time strictly after the naive ``wall`` that the fields match (naive). Within the minute of
        the last match found only the second can differ: a lookup, not APScheduler's search (most of a fire's cost)."""
        minute = wall.replace(second=0, microsecond=0)
        if minute == self._minute:
            index = bisect_right(self.spec.seconds, wall.second)
            if index < len(self.spec.seconds):
                return minute.replace(second=self.spec.seconds[index])
        match = self._wall.get_next_fire_time(None, (wall + _ONE_MICROSECOND).replace(tzinfo=UTC))
        if match is not None:
            match = match.replace(tzinfo=None)
            self._minute = match.replace(second=0)  # one assignment: another thread reads the old minute or this one
        return match

    def _instant(self, wall: datetime) -> datetime:
        """The UTC instant a wall time fires at: fold=0, the first pass or shifted forward past a gap."""
        return (wall - self._offsets(wall)[0]).replace(tzinfo=UTC)

    def _offsets(self, wall: datetime) -> tuple[timedelta, timedelta]:
        """The UTC offsets of the naive ``wall`` time's first (fold=0) and second (fold=1) readings."""
        return wall_offsets(wall, self.timezone)

    def _is_skipped(self, wall: datetime) -> bool:
        """Whether the naive ``wall`` time never happens (clocks jumped forward over it)."""
        before, after = self._offsets(wall)
        return before < after

    def _end_of_change(self, wall: datetime) -> datetime:
        """The first wall time after the skipped or repeated ``wall`` that happens exactly once.

        A binary search in whole seconds, as the tz database's changes are."""
        before, after = self._offsets(wall)
        low, high = 0, max(1, int(abs(before - after).total_seconds()))  # wall+low is in the change, +high not
        while high - low > 1:
            middle = (low + high) // 2
            middle_before, middle_after = self._offsets(wall + timedelta(seconds=middle))
            if middle_before != middle_after:
                low = middle
            else:
                high = middle
        return wall + timedelta(seconds=high)

    def __str__(self) -> str:
        return f"cron[{self.spec.expression}, {self.timezone}]"

    def __repr__(self) -> str:
        return f"<CronTrigger {self.spec.expression!r} timezone={self.timezone}>"


def iter_fire_times(trigger: CronTrigger, after: datetime) -> Iterator[datetime]:
    """Yield the trigger's fire times strictly after ``after``, in order."""
    current = trigger.next_after(after)
    while current is not None:
        yield current
        current = trigger.next_after(current)


def next_fire_times(
    spec: str | CronSpec, *, after: datetime, count: int = 1, timezone: str | tzinfo = "UTC"
) -> list[datetime]:
    """The next ``count`` fire times strictly after the aware ``after``, exactly as the scheduler fires them."""
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError(f"after={after!r} is naive; pass an aware datetime")
    if count < 0:
        raise ValueError(f"count={count!r} must not be negative")
    parsed = spec if isinstance(spec, CronSpec) else parse_cron(spec)
    trigger = CronTrigger(parsed, resolve_timezone(timezone))
    times = iter_fire_times(trigger, after)
    return [fire for _, fire in zip(range(count), times, strict=False)]
