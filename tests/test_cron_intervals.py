"""Specification of ``mutexcron.cron_intervals``: the shortest interval between two ticks of a cron spec, the bound
a job's jitter must stay below."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutexcron.cron import CronTrigger, iter_fire_times, parse_cron
from mutexcron.cron_intervals import shortest_interval

SECOND, MINUTE, HOUR, DAY = timedelta(seconds=1), timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)


def gaps(spec: str, count: int, after: datetime = datetime(2000, 1, 1, tzinfo=UTC)) -> list[timedelta]:
    """The intervals between the first ``count`` ticks of ``spec`` (UTC) after ``after``."""
    fires = islice(iter_fire_times(CronTrigger(parse_cron(spec)), after), count)
    return [later - earlier for earlier, later in pairwise(fires)]


@pytest.mark.parametrize(("spec", "interval"), [
    ("* * * * * *", SECOND),
    ("*/7 * * * * *", 4 * SECOND),  # :56 to the next minute's :00
    ("0 0,1 * * * *", MINUTE),  # twice an hour, a minute apart
    ("5,55 59 23 28-31 * *", 50 * SECOND),
    ("*/10 0 0 * * *", 10 * SECOND),
    ("0 0 0,23 * * *", HOUR),  # 23:00 to the next midnight
    ("* * * * *", MINUTE),
    ("@hourly", HOUR),
    ("30 59 23 * * *", DAY),
    ("0 0 * * 0,6", DAY),  # Saturday to Sunday
    ("0 0 13 * 5", DAY),  # Friday or the 13th: Thursday the 13th, then Friday the 14th
    ("@weekly", 7 * DAY),
    ("0 0 * * 1,5", 3 * DAY),  # Friday to Monday
    ("0 0 1 * *", 28 * DAY),  # February 1 to March 1
    ("0 0 31 * *", 31 * DAY),  # the 31st of July to that of August
    ("0 0 30 1,3 *", 59 * DAY),  # January 30 to March 30 of a leap year
    ("0 0 0 1 1 *", 365 * DAY),
    ("0 0 29 2 *", 1461 * DAY),  # four years, leap day to leap day
])
def test_the_shortest_interval_is_the_closest_two_ticks(spec: str, interval: timedelta) -> None:
    assert shortest_interval(parse_cron(spec)) == interval


def test_an_irregular_spec_is_judged_by_its_closest_ticks_not_its_first_two() -> None:
    assert gaps("0 0,1 * * * *", 2, after=datetime(2000, 1, 1, 0, 0, 30, tzinfo=UTC)) == [59 * MINUTE]
    assert shortest_interval(parse_cron("0 0,1 * * * *")) == MINUTE
    assert gaps("0 0 * * 1,5", 2, after=datetime(2023, 12, 31, tzinfo=UTC)) == [4 * DAY]  # Monday to Friday
    assert shortest_interval(parse_cron("0 0 * * 1,5")) == 3 * DAY


times = st.lists(st.integers(0, 59), min_size=1, max_size=4, unique=True)


@settings(max_examples=60, deadline=None)
@given(seconds=times, minutes=times, hours=st.lists(st.integers(0, 23), min_size=1, max_size=4, unique=True))
def test_on_every_day_the_shortest_interval_is_the_least_gap_of_two_days_of_ticks(
        seconds: list[int], minutes: list[int], hours: list[int]) -> None:
    """A spec firing every day repeats daily: two days of ticks hold every gap it has."""
    spec = f"{','.join(map(str, seconds))} {','.join(map(str, minutes))} {','.join(map(str, hours))} * * *"
    assert shortest_interval(parse_cron(spec)) == min(gaps(spec, 2 * len(seconds) * len(minutes) * len(hours) + 1))


days = st.lists(st.integers(1, 31), min_size=1, max_size=3, unique=True)


@settings(max_examples=60, deadline=None)
@given(days=days, months=st.lists(st.integers(1, 12), min_size=1, max_size=3, unique=True),
       weekdays=st.one_of(st.just("*"), st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True)))
def test_no_two_ticks_are_closer_than_the_shortest_interval(days: list[int], months: list[int],
                                                            weekdays: str | list[int]) -> None:
    spec = (f"0 0 {','.join(map(str, days))} {','.join(map(str, months))} "
            f"{weekdays if isinstance(weekdays, str) else ','.join(map(str, weekdays))}")
    try:
        parsed = parse_cron(spec)
    except ValueError:
        return  # a day none of its months has: it never fires
    assert min(gaps(spec, 300), default=timedelta.max) >= shortest_interval(parsed)
