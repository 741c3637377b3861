"""Specification of ``mutexcron.cron``: parsing cron expressions and computing their fire times.

One behaviour per test. The field-matching semantics are also checked against croniter, an independent
implementation, by a property test at the end; the DST rules are checked against the documented rule of
:class:`mutexcron.cron.CronTrigger` (each matching wall time fires once: a repeated wall time at its first
occurrence, a wall time skipped by a spring-forward gap shifted by the gap, and no instant twice).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import CroniterBadDateError, croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutexcron import cron
from mutexcron.cron import MACROS, CronSpec, CronTrigger, iter_fire_times, next_fire_times, parse_cron
from mutexcron.errors import CronSpecError

START = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday
SUNDAY, MONDAY, WEDNESDAY, FRIDAY = 6, 0, 2, 4  # datetime.weekday() numbering


def fires(spec: str | CronSpec, count: int, *, after: datetime = START, timezone: str = "UTC") -> list[datetime]:
    return next_fire_times(spec, after=after, count=count, timezone=timezone)


def in_utc(times: list[datetime]) -> list[datetime]:
    """Fire times as UTC instants. Compare these: an aware datetime in a repeated hour never equals one
    in another zone (PEP 495), and two in the same zone compare by wall time, ignoring fold."""
    return [t.astimezone(UTC) for t in times]


def fire_dates(spec: str, *, days: int = 366, after: datetime = START) -> set[date]:
    """The UTC dates on which a once-a-day-at-most ``spec`` fires in the ``days`` after ``after``."""
    trigger = CronTrigger(parse_cron(spec))
    dates: set[date] = set()
    for fire in iter_fire_times(trigger, after):
        if fire >= after + timedelta(days=days):
            break
        dates.add(fire.date())
    return dates


def every_day(*, days: int = 366, after: datetime = START) -> list[date]:
    """The dates after ``after``'s (midnight) whose midnight is within ``days`` days of it."""
    return [after.date() + timedelta(days=n) for n in range(1, days)]


# --- field order ------------------------------------------------------------------------------------


def test_five_fields_are_min_hour_dom_month_dow_with_second_zero() -> None:
    assert fires("30 14 15 3 *", 1) == [datetime(2024, 3, 15, 14, 30, 0, tzinfo=UTC)]


def test_five_field_spec_allows_only_second_zero() -> None:
    assert parse_cron("* * * * *").seconds == (0,)


def test_six_fields_are_sec_min_hour_dom_month_dow() -> None:
    assert fires("1 2 3 4 5 *", 1) == [datetime(2024, 5, 4, 3, 2, 1, tzinfo=UTC)]


def test_six_fields_fire_at_the_given_second() -> None:
    assert fires("15,45 * * * * *", 3) == [
        START + timedelta(seconds=15),
        START + timedelta(seconds=45),
        START + timedelta(minutes=1, seconds=15),
    ]


def test_whitespace_between_fields_may_be_any_run_of_spaces_and_tabs() -> None:
    assert fires("  30\t14  * *   *  ", 1) == fires("30 14 * * *", 1)


# --- day of week numbering ----------------------------------------------------------------------------


def test_dow_0_is_sunday_never_monday() -> None:
    times = fires("0 6 * * 0", 20)
    assert {t.weekday() for t in times} == {SUNDAY}
    assert times[0] == datetime(2024, 1, 7, 6, tzinfo=UTC)


def test_dow_7_is_sunday() -> None:
    assert fires("0 6 * * 7", 20) == fires("0 6 * * 0", 20)


@pytest.mark.parametrize(("cron_day", "python_weekday"), [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4), (6, 5)])
def test_dow_1_to_6_are_monday_to_saturday(cron_day: int, python_weekday: int) -> None:
    assert {t.weekday() for t in fires(f"0 6 * * {cron_day}", 10)} == {python_weekday}


def test_dow_range_ending_at_7_includes_sunday() -> None:
    assert parse_cron("* * * * 5-7").weekdays == (0, 5, 6)
    assert {t.weekday() for t in fires("0 0 * * 5-7", 21)} == {FRIDAY, 5, SUNDAY}


def test_dow_0_to_7_is_every_day() -> None:
    assert parse_cron("0 0 * * 0-7").weekdays == tuple(range(7))


def test_a_dow_start_step_ends_at_saturday() -> None:
    assert parse_cron("0 0 * * wed/2").weekdays == (3, 5)
    assert {t.weekday() for t in fires("0 0 * * wed/2", 21)} == {WEDNESDAY, FRIDAY}


def test_a_dow_start_step_from_saturday_is_saturday_only() -> None:
    assert parse_cron("0 0 * * 6/1").weekdays == (6,)


def test_a_dow_start_step_from_7_starts_at_sunday() -> None:
    assert parse_cron("0 0 * * 7/3").weekdays == parse_cron("0 0 * * 0/3").weekdays == (0, 3, 6)


def test_a_dow_range_step_still_reaches_7_as_sunday() -> None:
    assert parse_cron("0 0 * * 3-7/2").weekdays == (0, 3, 5)


@pytest.mark.parametrize("start", range(8))
@pytest.mark.parametrize("step", range(1, 8))
def test_every_dow_start_step_fires_on_the_days_croniter_gives(start: int, step: int) -> None:
    expression = f"0 0 * * {start}/{step}"
    assert fires(expression, 14) == croniter_fire_times(expression, START, 14)


# --- names --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["MON-FRI", "mon-fri", "Mon-Fri", "mOn-FrI", "1-5", "mon-5", "1-fri"])
def test_weekday_names_are_case_insensitive_and_mix_with_numbers(text: str) -> None:
    assert parse_cron(f"0 0 * * {text}").weekdays == (1, 2, 3, 4, 5)


@pytest.mark.parametrize("text", ["jan", "JAN", "Jan", "1"])
def test_month_names_are_case_insensitive(text: str) -> None:
    assert parse_cron(f"0 0 1 {text} *").months == (1,)


def test_all_month_names_in_order() -> None:
    names = "jan,feb,mar,apr,may,jun,jul,aug,sep,oct,nov,dec"
    for number, name in enumerate(names.split(","), start=1):
        assert parse_cron(f"0 0 1 {name} *").months == (number,)


def test_all_weekday_names_in_order() -> None:
    for number, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"]):
        assert parse_cron(f"0 0 * * {name}").weekdays == (number,)


def test_name_ranges_and_lists() -> None:
    spec = parse_cron("0 0 * JAN-MAR,oct sat,SUN")
    assert spec.months == (1, 2, 3, 10)
    assert spec.weekdays == (0, 6)


def test_weekdays_by_name_fire_only_on_those_days() -> None:
    assert {t.weekday() for t in fires("0 9 * * MON-FRI", 30)} == {0, 1, 2, 3, 4}


# --- macros -------------------------------------------------------------------------------------------


def test_macros_are_exactly_the_documented_ones() -> None:
    assert set(MACROS) == {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


@pytest.mark.parametrize(
    ("macro", "first", "second"),
    [
        ("@yearly", datetime(2025, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
        ("@annually", datetime(2025, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)),
        ("@monthly", datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 1, tzinfo=UTC)),
        ("@weekly", datetime(2024, 1, 7, tzinfo=UTC), datetime(2024, 1, 14, tzinfo=UTC)),  # Sundays
        ("@daily", datetime(2024, 1, 2, tzinfo=UTC), datetime(2024, 1, 3, tzinfo=UTC)),
        ("@midnight", datetime(2024, 1, 2, tzinfo=UTC), datetime(2024, 1, 3, tzinfo=UTC)),
        ("@hourly", datetime(2024, 1, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, 2, tzinfo=UTC)),
    ],
)
def test_each_macro_fires_at_its_schedule(macro: str, first: datetime, second: datetime) -> None:
    assert fires(macro, 2) == [first, second]


@pytest.mark.parametrize("macro", sorted(MACROS))
def test_each_macro_equals_its_five_field_expression(macro: str) -> None:
    assert fires(macro, 5) == fires(MACROS[macro], 5)


def test_macros_are_case_insensitive() -> None:
    assert fires("@DAILY", 3) == fires("@daily", 3)


# --- ranges, steps and lists ----------------------------------------------------------------------------


def test_range_includes_both_ends() -> None:
    assert parse_cron("0 9-11 * * *").hours == (9, 10, 11)
    assert [t.hour for t in fires("0 9-11 * * *", 4)] == [9, 10, 11, 9]


def test_star_step_counts_from_the_field_minimum() -> None:
    assert parse_cron("*/20 * * * *").minutes == (0, 20, 40)
    assert parse_cron("0 0 */10 * *").days == (1, 11, 21, 31)
    assert parse_cron("0 0 1 */5 *").months == (1, 6, 11)


def test_range_step_stays_inside_the_range() -> None:
    assert parse_cron("10-40/15 * * * *").minutes == (10, 25, 40)
    assert parse_cron("10-39/15 * * * *").minutes == (10, 25)


def test_start_step_runs_from_start_to_the_field_maximum() -> None:
    assert parse_cron("5/20 * * * *").minutes == (5, 25, 45)
    assert parse_cron("0 0 25/3 * *").days == (25, 28, 31)
    assert parse_cron("0 0 1 nov/1 *").months == (11, 12)
    assert parse_cron("59/15 * * * * *").seconds == (59,)


def test_step_larger_than_range_keeps_only_the_start() -> None:
    assert parse_cron("5-10/20 * * * *").minutes == (5,)


def test_list_of_values() -> None:
    assert parse_cron("0,15,45 * * * *").minutes == (0, 15, 45)
    assert [t.minute for t in fires("0,15,45 * * * *", 4)] == [15, 45, 0, 15]


def test_list_mixes_values_ranges_and_steps() -> None:
    assert parse_cron("1-3,10-20/5,59,*/30 * * * * *").seconds == (0, 1, 2, 3, 10, 15, 20, 30, 59)


def test_single_value_range_is_that_value() -> None:
    assert parse_cron("0 5-5 * * *").hours == (5,)


# --- day of month OR day of week ----------------------------------------------------------------------


def test_dom_or_dow_when_both_restricted() -> None:
    dates = fire_dates("0 0 13 * 5")
    expected = {d for d in every_day() if d.day == 13 or d.weekday() == FRIDAY}
    assert dates == expected
    assert any(d.day == 13 and d.weekday() != FRIDAY for d in dates)
    assert any(d.day != 13 and d.weekday() == FRIDAY for d in dates)


def test_only_dom_matters_when_dow_is_star() -> None:
    assert fire_dates("0 0 13 * *") == {d for d in every_day() if d.day == 13}


def test_only_dow_matters_when_dom_is_star() -> None:
    assert fire_dates("0 0 * * 5") == {d for d in every_day() if d.weekday() == FRIDAY}


def test_and_like_when_month_also_restricted() -> None:
    assert fire_dates("0 0 * 3 5") == {d for d in every_day() if d.month == 3 and d.weekday() == FRIDAY}


def test_star_step_in_dow_counts_as_restricted() -> None:
    # */2 is Sunday, Tuesday, Thursday, Saturday: restricted, so the OR rule applies.
    dates = fire_dates("0 0 1 * */2")
    assert dates == {d for d in every_day() if d.day == 1 or d.weekday() in (SUNDAY, 1, 3, 5)}


def test_star_step_in_dom_counts_as_restricted() -> None:
    dates = fire_dates("0 0 */2 * mon")
    assert dates == {d for d in every_day() if d.day % 2 == 1 or d.weekday() == MONDAY}


def test_full_range_dom_is_restricted_so_every_day_fires() -> None:
    # Only a bare * leaves a day field out of the OR rule (Vixie cron, POSIX, croniter): 1-31 OR Monday.
    assert fire_dates("0 0 1-31 * mon") == set(every_day())


@pytest.mark.parametrize("dow", ["0-6", "1-7", "0-7", "sun-sat", "*/1", "0,1-3,4-6", "3-7,1-2"])
def test_dow_covering_every_day_is_restricted_so_every_day_of_the_month_fires(dow: str) -> None:
    # The 23rd OR any day of the week: every day of October, not only the 23rd.
    assert fire_dates(f"0 0 23 10 {dow}") == {d for d in every_day() if d.month == 10}


def test_a_day_field_covering_every_day_is_unrestricted_when_the_other_has_a_star_as_in_croniter() -> None:
    # */2 is restricted, but beside it 0-6 (or 1-31) counts as *, so */2 alone decides.
    assert fire_dates("0 0 */2 * 0-6") == {d for d in every_day() if d.day % 2 == 1}
    assert fire_dates("0 0 1-31 * */2") == {d for d in every_day() if d.weekday() in (SUNDAY, 1, 3, 5)}


def test_a_day_no_allowed_month_has_beside_a_dow_covering_every_day_fires_every_day_of_the_month() -> None:
    # 30 February OR any day of the week: every day of February (it was "never fires" while 0-6 counted as *).
    assert fire_dates("0 0 30 2 0-6") == {d for d in every_day() if d.month == 2}


def test_or_rule_with_a_day_no_allowed_month_has_fires_on_the_weekdays() -> None:
    # February never has a 30th, so only the Mondays of February remain.
    dates = fire_dates("0 0 30 2 mon", days=3 * 366)
    assert dates == {d for d in every_day(days=3 * 366) if d.month == 2 and d.weekday() == MONDAY}


def test_february_29_fires_only_in_leap_years() -> None:
    assert fires("0 0 29 2 *", 3) == [
        datetime(2024, 2, 29, tzinfo=UTC),
        datetime(2028, 2, 29, tzinfo=UTC),
        datetime(2032, 2, 29, tzinfo=UTC),
    ]


def test_day_31_skips_shorter_months() -> None:
    assert [t.month for t in fires("0 0 31 * *", 7)] == [1, 3, 5, 7, 8, 10, 12]


# --- next_fire_times ----------------------------------------------------------------------------------


def test_fire_times_are_strictly_after_after() -> None:
    noon = datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert fires("0 12 * * *", 1, after=noon) == [datetime(2024, 1, 2, 12, tzinfo=UTC)]


def test_fire_time_just_after_after_is_included() -> None:
    before_noon = datetime(2024, 1, 1, 11, 59, 59, 999999, tzinfo=UTC)
    assert fires("0 12 * * *", 1, after=before_noon) == [datetime(2024, 1, 1, 12, tzinfo=UTC)]


def test_fractional_after_rounds_up_to_the_next_matching_second() -> None:
    after = datetime(2024, 1, 1, 0, 0, 5, 500000, tzinfo=UTC)
    assert fires("* * * * * *", 1, after=after) == [datetime(2024, 1, 1, 0, 0, 6, tzinfo=UTC)]


def test_count_fire_times_in_increasing_order() -> None:
    times = fires("*/7 * * * *", 50)
    assert len(times) == 50
    assert all(a < b for a, b in pairwise(times))


def test_count_zero_gives_no_fire_times() -> None:
    assert fires("* * * * *", 0) == []


def test_negative_count_is_rejected() -> None:
    with pytest.raises(ValueError, match="count"):
        fires("* * * * *", -1)


def test_naive_after_is_rejected() -> None:
    with pytest.raises(ValueError, match="naive"):
        next_fire_times("* * * * *", after=datetime(2024, 1, 1))


def test_accepts_a_parsed_spec() -> None:
    assert fires(parse_cron("0 12 * * *"), 2) == fires("0 12 * * *", 2)


def test_after_in_any_zone_is_the_same_instant() -> None:
    after = START.astimezone(ZoneInfo("Asia/Tokyo"))
    assert fires("0 12 * * *", 3, after=after) == fires("0 12 * * *", 3)


def test_thousand_fire_times_of_every_second_are_consecutive_seconds() -> None:
    # Performance sanity (deliberately untimed): this must not crawl.
    times = fires("* * * * * *", 1000)
    assert times == [START + timedelta(seconds=n) for n in range(1, 1001)]


def test_trigger_get_next_fire_time_is_at_or_after_now_without_a_previous_fire() -> None:
    trigger = CronTrigger(parse_cron("0 12 * * *"), UTC)
    noon = datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, noon) == noon
    assert trigger.get_next_fire_time(noon, noon) == noon + timedelta(days=1)


# --- time zones ---------------------------------------------------------------------------------------


def test_timezone_is_respected_in_winter_and_summer() -> None:
    winter = fires("0 9 * * *", 1, timezone="America/New_York")
    summer = fires("0 9 * * *", 1, after=datetime(2024, 7, 1, tzinfo=UTC), timezone="America/New_York")
    assert winter == [datetime(2024, 1, 1, 14, tzinfo=UTC)]
    assert summer == [datetime(2024, 7, 1, 13, tzinfo=UTC)]


def test_fire_times_are_given_in_the_jobs_zone() -> None:
    (fire,) = fires("0 9 * * *", 1, timezone="Europe/Paris")
    assert fire.tzinfo == ZoneInfo("Europe/Paris")
    assert (fire.hour, fire.minute) == (9, 0)


def test_default_timezone_is_utc() -> None:
    assert next_fire_times("0 9 * * *", after=START) == [datetime(2024, 1, 1, 9, tzinfo=UTC)]


def test_timezone_may_be_a_tzinfo() -> None:
    plus_five = timezone(timedelta(hours=5))
    assert next_fire_times("0 9 * * *", after=START, timezone=plus_five) == [datetime(2024, 1, 1, 4, tzinfo=UTC)]
    assert fires("0 9 * * *", 3, timezone="Europe/Paris") == next_fire_times(
        "0 9 * * *", after=START, count=3, timezone=ZoneInfo("Europe/Paris")
    )


def named_zone(kind: str, name: str) -> tzinfo:
    """The zone ``name`` as a ``zoneinfo``, ``pytz`` or ``dateutil`` tzinfo (a test of a kind not installed skips)."""
    if kind == "pytz":
        return pytest.importorskip("pytz").timezone(name)  # type: ignore[no-any-return]
    if kind == "dateutil":
        return pytest.importorskip("dateutil.tz").gettz(name)  # type: ignore[no-any-return]
    return ZoneInfo(name)


def fixed_zone(kind: str, hours: int) -> tzinfo:
    """A fixed UTC offset as a ``datetime.timezone`` or a ``pytz.FixedOffset``."""
    if kind == "pytz":
        return pytest.importorskip("pytz").FixedOffset(hours * 60)  # type: ignore[no-any-return]
    return timezone(timedelta(hours=hours))


def berlin_walls(spec: str, after: datetime, count: int, zone: tzinfo) -> list[tuple[datetime, datetime]]:
    """The next fire times of ``spec`` in ``zone``, each as (UTC instant, naive Berlin wall-clock time)."""
    berlin = ZoneInfo("Europe/Berlin")
    times = next_fire_times(spec, after=after, count=count, timezone=zone)
    return [(t.astimezone(UTC), t.astimezone(berlin).replace(tzinfo=None)) for t in times]


ZONE_KINDS = ["zoneinfo", "pytz", "dateutil"]


@pytest.mark.parametrize("kind", ZONE_KINDS)
def test_a_daily_time_fires_at_that_wall_clock_time_on_both_sides_of_a_dst_change(kind: str) -> None:
    # Berlin's clocks go forward on 2024-03-31 at 02:00 (UTC+1 to UTC+2).
    walls = berlin_walls("0 9 * * *", datetime(2024, 3, 30, tzinfo=UTC), 3, named_zone(kind, "Europe/Berlin"))
    assert walls == [
        (datetime(2024, 3, 30, 8, tzinfo=UTC), datetime(2024, 3, 30, 9)),
        (datetime(2024, 3, 31, 7, tzinfo=UTC), datetime(2024, 3, 31, 9)),
        (datetime(2024, 4, 1, 7, tzinfo=UTC), datetime(2024, 4, 1, 9)),
    ]


@pytest.mark.parametrize("kind", ZONE_KINDS)
def test_a_time_skipped_by_the_spring_change_fires_shifted_by_the_gap_in_any_zone_kind(kind: str) -> None:
    walls = berlin_walls("30 2 * * *", datetime(2024, 3, 30, 12, tzinfo=UTC), 2, named_zone(kind, "Europe/Berlin"))
    assert walls == [
        (datetime(2024, 3, 31, 1, 30, tzinfo=UTC), datetime(2024, 3, 31, 3, 30)),
        (datetime(2024, 4, 1, 0, 30, tzinfo=UTC), datetime(2024, 4, 1, 2, 30)),
    ]


@pytest.mark.parametrize("kind", ZONE_KINDS)
def test_a_time_repeated_by_the_autumn_change_fires_once_at_its_first_pass_in_any_zone_kind(kind: str) -> None:
    # Berlin's clocks go back on 2024-10-27 at 03:00 (UTC+2 to UTC+1): 02:30 happens twice.
    walls = berlin_walls("30 2 * * *", datetime(2024, 10, 26, 12, tzinfo=UTC), 2, named_zone(kind, "Europe/Berlin"))
    assert walls == [
        (datetime(2024, 10, 27, 0, 30, tzinfo=UTC), datetime(2024, 10, 27, 2, 30)),
        (datetime(2024, 10, 28, 1, 30, tzinfo=UTC), datetime(2024, 10, 28, 2, 30)),
    ]


@pytest.mark.parametrize("kind", ["datetime.timezone", "pytz"])
def test_a_fixed_offset_zone_fires_at_the_same_utc_time_across_a_dst_change_elsewhere(kind: str) -> None:
    times = next_fire_times("0 9 * * *", after=datetime(2024, 3, 30, tzinfo=UTC), count=3,
                            timezone=fixed_zone(kind, 2))
    assert in_utc(times) == [datetime(2024, 3, day, 7, tzinfo=UTC) for day in (30, 31)] + [
        datetime(2024, 4, 1, 7, tzinfo=UTC)]
    assert {(t.hour, t.minute, t.utcoffset()) for t in times} == {(9, 0, timedelta(hours=2))}


def test_a_pytz_zone_is_read_as_the_zoneinfo_of_its_name() -> None:
    pytz = pytest.importorskip("pytz")
    trigger = CronTrigger(parse_cron("0 9 * * *"), pytz.timezone("Europe/Berlin"))
    assert trigger.timezone == ZoneInfo("Europe/Berlin")
    assert str(trigger) == "cron[0 9 * * *, Europe/Berlin]"


def test_unknown_timezone_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="Mars/Olympus_Mons"):
        fires("0 9 * * *", 1, timezone="Mars/Olympus_Mons")


# --- daylight saving time -------------------------------------------------------------------------------

# (zone, day of the change, wall time inside the skipped or repeated hour, the fire's expected UTC instant)
SKIPPED_HOUR = [
    # 01:00 GMT -> 02:00 BST: 01:30 is skipped and fires at 02:30 BST.
    pytest.param("Europe/London", date(2024, 3, 31), "30 1", datetime(2024, 3, 31, 1, 30, tzinfo=UTC), id="London"),
    # 02:00 EST -> 03:00 EDT: 02:30 is skipped and fires at 03:30 EDT.
    pytest.param("America/New_York", date(2024, 3, 10), "30 2", datetime(2024, 3, 10, 7, 30, tzinfo=UTC), id="NY"),
    # Southern hemisphere, spring in October: 02:00 AEST -> 03:00 AEDT, 02:30 fires at 03:30 AEDT.
    pytest.param("Australia/Sydney", date(2024, 10, 6), "30 2", datetime(2024, 10, 5, 16, 30, tzinfo=UTC), id="Sydney"),
]
REPEATED_HOUR = [
    # 02:00 BST -> 01:00 GMT: 01:30 happens twice; the first is 00:30 UTC.
    pytest.param("Europe/London", date(2024, 10, 27), "30 1", datetime(2024, 10, 27, 0, 30, tzinfo=UTC), id="London"),
    # 02:00 EDT -> 01:00 EST: 01:30 EDT is 05:30 UTC.
    pytest.param("America/New_York", date(2024, 11, 3), "30 1", datetime(2024, 11, 3, 5, 30, tzinfo=UTC), id="NY"),
    # Southern hemisphere, autumn in April: 03:00 AEDT -> 02:00 AEST; 02:30 AEDT is 15:30 UTC the day before.
    pytest.param("Australia/Sydney", date(2024, 4, 7), "30 2", datetime(2024, 4, 6, 15, 30, tzinfo=UTC), id="Sydney"),
]
TRANSITIONS = [
    pytest.param("Europe/London", date(2024, 3, 31), date(2024, 10, 27), id="London"),
    pytest.param("America/New_York", date(2024, 3, 10), date(2024, 11, 3), id="NY"),
    pytest.param("Australia/Sydney", date(2024, 10, 6), date(2024, 4, 7), id="Sydney"),
]


def daily_fires_around(zone: str, day: date, hour_minute: str, *, days: int = 5) -> list[datetime]:
    """The daily job's fire times from ``days`` local days before ``day`` to ``days`` after it."""
    tz = ZoneInfo(zone)
    after = datetime.combine(day - timedelta(days=days), datetime.min.time(), tz)
    return fires(f"{hour_minute} * * *", 2 * days + 1, after=after, timezone=zone)


def local_days(day: date, *, days: int = 5) -> list[date]:
    return [day + timedelta(days=n) for n in range(-days, days + 1)]


@pytest.mark.parametrize(("zone", "day", "hour_minute", "expected"), SKIPPED_HOUR + REPEATED_HOUR)
def test_daily_job_fires_exactly_once_per_local_day_across_dst(
    zone: str, day: date, hour_minute: str, expected: datetime
) -> None:
    times = daily_fires_around(zone, day, hour_minute)
    assert [t.astimezone(ZoneInfo(zone)).date() for t in times] == local_days(day)


@pytest.mark.parametrize(("zone", "day", "hour_minute", "expected"), SKIPPED_HOUR + REPEATED_HOUR)
def test_daily_job_fire_times_strictly_increase_across_dst(
    zone: str, day: date, hour_minute: str, expected: datetime
) -> None:
    times = in_utc(daily_fires_around(zone, day, hour_minute))
    assert all(a < b for a, b in pairwise(times))
    assert len(set(times)) == len(times)


@pytest.mark.parametrize(("zone", "day", "hour_minute", "expected"), SKIPPED_HOUR)
def test_wall_time_skipped_by_spring_forward_fires_shifted_by_the_gap(
    zone: str, day: date, hour_minute: str, expected: datetime
) -> None:
    on_the_day = [t for t in daily_fires_around(zone, day, hour_minute) if t.date() == day]
    assert in_utc(on_the_day) == [expected]
    minute, hour = (int(part) for part in hour_minute.split())
    assert (on_the_day[0].hour, on_the_day[0].minute) == (hour + 1, minute)  # one hour later on the clock


@pytest.mark.parametrize(("zone", "day", "hour_minute", "expected"), REPEATED_HOUR)
def test_wall_time_repeated_by_fall_back_fires_at_its_first_occurrence_only(
    zone: str, day: date, hour_minute: str, expected: datetime
) -> None:
    on_the_day = [t for t in daily_fires_around(zone, day, hour_minute) if t.date() == day]
    assert in_utc(on_the_day) == [expected]
    assert on_the_day[0].fold == 0


@pytest.mark.parametrize(("zone", "day", "hour_minute", "expected"), REPEATED_HOUR)
def test_daily_job_after_the_first_occurrence_of_a_repeated_time_waits_for_the_next_day(
    zone: str, day: date, hour_minute: str, expected: datetime
) -> None:
    # `after` inside the second pass through the repeated hour: the job already ran at the first.
    second_pass = expected + timedelta(hours=1)
    after = second_pass - timedelta(minutes=10)
    assert in_utc(fires(f"{hour_minute} * * *", 1, after=after, timezone=zone)) == [
        expected + timedelta(days=1, hours=1)
    ]


@pytest.mark.parametrize(("zone", "day", "hour_minute", "expected"), SKIPPED_HOUR)
def test_shifted_fire_is_found_from_an_instant_just_after_the_gap(
    zone: str, day: date, hour_minute: str, expected: datetime
) -> None:
    # `after` is on the clock past the skipped wall time, but before the instant it fires at.
    after = expected - timedelta(minutes=20)
    assert in_utc(fires(f"{hour_minute} * * *", 1, after=after, timezone=zone)) == [expected]


def test_skipped_wall_time_that_shifts_onto_a_matching_time_fires_once() -> None:
    # 01:30 is skipped on 2024-03-31 and shifts to 02:30 BST, which also matches on its own: one fire.
    times = fires("30 1,2 * * *", 5, after=datetime(2024, 3, 30, tzinfo=UTC), timezone="Europe/London")
    assert in_utc(times) == [
        datetime(2024, 3, 30, 1, 30, tzinfo=UTC),
        datetime(2024, 3, 30, 2, 30, tzinfo=UTC),
        datetime(2024, 3, 31, 1, 30, tzinfo=UTC),
        datetime(2024, 4, 1, 0, 30, tzinfo=UTC),
        datetime(2024, 4, 1, 1, 30, tzinfo=UTC),
    ]


def quarter_hour_fires(zone: str, day: date) -> list[datetime]:
    after = datetime.combine(day - timedelta(days=1), datetime.min.time(), ZoneInfo(zone))
    return fires("*/15 * * * *", 3 * 24 * 4, after=after, timezone=zone)


@pytest.mark.parametrize(("zone", "spring", "autumn"), TRANSITIONS)
def test_every_15_minutes_never_goes_back_in_time_across_dst(zone: str, spring: date, autumn: date) -> None:
    for day in (spring, autumn):
        times = in_utc(quarter_hour_fires(zone, day))
        assert all(a < b for a, b in pairwise(times))


@pytest.mark.parametrize(("zone", "spring", "autumn"), TRANSITIONS)
def test_every_15_minutes_never_fires_the_same_instant_twice_across_dst(zone: str, spring: date, autumn: date) -> None:
    for day in (spring, autumn):
        times = in_utc(quarter_hour_fires(zone, day))
        assert len(set(times)) == len(times)


@pytest.mark.parametrize(("zone", "spring", "autumn"), TRANSITIONS)
def test_every_15_minutes_fires_every_quarter_hour_except_in_the_second_pass_of_a_repeated_hour(
    zone: str, spring: date, autumn: date
) -> None:
    for day in (spring, autumn):
        local = quarter_hour_fires(zone, day)
        gaps = [b - a for a, b in pairwise(in_utc(local))]
        assert all(t.minute % 15 == 0 and t.second == 0 for t in local)
        assert all(t.fold == 0 for t in local)
        # Only the repeated hour leaves a hole: its second pass repeats wall times that already fired.
        assert sorted(set(gaps)) == (
            [timedelta(minutes=15)] if day == spring else [timedelta(minutes=15), timedelta(hours=1, minutes=15)]
        )


@pytest.mark.parametrize(("zone", "spring", "autumn"), TRANSITIONS)
@pytest.mark.parametrize("spec", ["*/15 * * * *", "30 1,2 * * *", "30 2 * * *", "0 1-3 * * *", "*/20 * 1-3 * * *"])
def test_next_fire_after_any_instant_is_the_next_of_the_whole_sequence(
    zone: str, spring: date, autumn: date, spec: str
) -> None:
    """Asking from any instant -- inside a gap's aftermath or a repeated hour -- agrees with the sequence."""
    for day in (spring, autumn):
        start = datetime.combine(day - timedelta(days=1), datetime.min.time(), ZoneInfo(zone)).astimezone(UTC)
        end = start + timedelta(days=3)
        sequence = []
        for fire in iter_fire_times(CronTrigger(parse_cron(spec), ZoneInfo(zone)), start):
            sequence.append(fire.astimezone(UTC))
            if fire > end:
                break
        probe = start
        while probe < end:
            expected = next(fire for fire in sequence if fire > probe)
            assert in_utc(fires(spec, 1, after=probe, timezone=zone)) == [expected], probe
            probe += timedelta(minutes=7, seconds=30)


# --- bad input ----------------------------------------------------------------------------------------

# (field name, position in a 6-field expression, bad value)
BAD_FIELD_VALUES = [
    # out of range
    ("second", 0, "60"),
    ("minute", 1, "60"),
    ("hour", 2, "24"),
    ("day of month", 3, "0"),
    ("day of month", 3, "32"),
    ("month", 4, "0"),
    ("month", 4, "13"),
    ("day of week", 5, "8"),
    ("minute", 1, "5-60"),
    ("hour", 2, "99999999999999999999"),
    # bad names, including a name from another field
    ("second", 0, "abc"),
    ("minute", 1, "mon"),
    ("hour", 2, "noon"),
    ("day of month", 3, "first"),
    ("month", 4, "foo"),
    ("month", 4, "mon"),
    ("month", 4, "january"),
    ("day of week", 5, "funday"),
    ("day of week", 5, "jan"),
    ("day of week", 5, "FOO"),
    # reversed ranges
    ("second", 0, "30-10"),
    ("minute", 1, "59-0"),
    ("hour", 2, "23-1"),
    ("day of month", 3, "20-10"),
    ("month", 4, "dec-jan"),
    ("day of week", 5, "fri-mon"),
    ("day of week", 5, "7-1"),
    # zero and oversized steps
    ("second", 0, "*/0"),
    ("minute", 1, "0-30/0"),
    ("hour", 2, "5/0"),
    ("day of month", 3, "*/0"),
    ("month", 4, "*/0"),
    ("day of week", 5, "*/0"),
    ("second", 0, "*/60"),
    ("month", 4, "*/13"),
    # empty list items
    ("second", 0, "1,,2"),
    ("minute", 1, "1,"),
    ("hour", 2, ",1"),
    ("day of month", 3, "1,,2"),
    ("month", 4, ","),
    ("day of week", 5, "mon,"),
    # syntax from other cron dialects, negative numbers and stray characters
    ("day of month", 3, "?"),
    ("day of week", 5, "?"),
    ("day of month", 3, "L"),
    ("day of week", 5, "5L"),
    ("day of week", 5, "L"),
    ("day of month", 3, "15W"),
    ("day of week", 5, "1#2"),
    ("minute", 1, "H"),
    ("second", 0, "-1"),
    ("hour", 2, "*-5"),
    ("minute", 1, "1-"),
    ("hour", 2, "1/"),
    ("day of month", 3, "1.5"),
    ("month", 4, "\uff11"),  # a full-width digit one
]


def with_field(position: int, value: str) -> str:
    fields = ["0", "0", "0", "1", "1", "*"]
    fields[position] = value
    return " ".join(fields)


@pytest.mark.parametrize(("field", "position", "value"), BAD_FIELD_VALUES)
def test_bad_field_value_names_the_job_the_field_and_the_value(field: str, position: int, value: str) -> None:
    with pytest.raises(CronSpecError) as raised:
        parse_cron(with_field(position, value), job_name="nightly-report")
    message = str(raised.value)
    assert "'nightly-report'" in message
    assert f"'{field}'" in message
    assert repr(value) in message


@pytest.mark.parametrize(("field", "position", "value"), BAD_FIELD_VALUES)
def test_bad_field_value_without_a_job_name_names_the_field_and_the_value(
    field: str, position: int, value: str
) -> None:
    with pytest.raises(CronSpecError) as raised:
        parse_cron(with_field(position, value))
    assert f"'{field}'" in str(raised.value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize(("field", "position", "value"), [bad for bad in BAD_FIELD_VALUES if bad[1] > 0])
def test_bad_field_value_in_a_five_field_spec_names_the_field(field: str, position: int, value: str) -> None:
    five = with_field(position, value).split(" ", 1)[1]
    with pytest.raises(CronSpecError, match=f"'{field}'"):
        parse_cron(five)


@pytest.mark.parametrize(
    "expression",
    ["", "   ", "*", "* *", "* * * *", "* * * * * * *", "0 0 0 1 1 * 2024", "0 0 * * * * * *"],
)
def test_wrong_number_of_fields_names_the_job_and_the_expression(expression: str) -> None:
    with pytest.raises(CronSpecError) as raised:
        parse_cron(expression, job_name="nightly-report")
    message = str(raised.value)
    assert "'nightly-report'" in message
    if expression.strip():
        assert repr(expression) in message
        assert f"has {len(expression.split())} fields" in message
    else:
        assert "empty" in message


@pytest.mark.parametrize("macro", ["@reboot", "@every_minute", "@", "@daily 5", "@weekdays", "@hourly,@daily"])
def test_unknown_macro_names_the_job_and_the_macro(macro: str) -> None:
    with pytest.raises(CronSpecError) as raised:
        parse_cron(macro, job_name="nightly-report")
    message = str(raised.value)
    assert "'nightly-report'" in message
    assert repr(macro) in message
    assert "macro" in message


@pytest.mark.parametrize("value", [None, 5, 1.5, b"* * * * *", ["*", "*", "*", "*", "*"]])
def test_non_string_spec_names_the_job_and_the_value(value: object) -> None:
    with pytest.raises(CronSpecError) as raised:
        parse_cron(value, job_name="nightly-report")  # type: ignore[arg-type]
    message = str(raised.value)
    assert "'nightly-report'" in message
    assert type(value).__name__ in message
    assert repr(value) in message


@pytest.mark.parametrize(
    ("expression", "days"),
    [("0 0 30 2 *", "'30'"), ("0 0 31 4,6,9,11 *", "'31'"), ("0 0 30,31 feb *", "'30,31'"), ("0 0 0 31 2 *", "'31'")],
)
def test_impossible_day_and_month_combination_is_rejected(expression: str, days: str) -> None:
    with pytest.raises(CronSpecError) as raised:
        parse_cron(expression, job_name="nightly-report")
    message = str(raised.value)
    assert "'nightly-report'" in message
    assert "'day of month'" in message
    assert days in message


def test_day_some_allowed_month_has_is_accepted() -> None:
    assert parse_cron("0 0 30,31 2,3 *").days == (30, 31)
    assert fires("0 0 30,31 2,3 *", 2) == [datetime(2024, 3, 30, tzinfo=UTC), datetime(2024, 3, 31, tzinfo=UTC)]


def test_cron_spec_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_cron("61 * * * *")


def test_next_fire_times_rejects_a_bad_spec_with_cron_spec_error() -> None:
    with pytest.raises(CronSpecError, match="'minute'"):
        next_fire_times("61 * * * *", after=START)


# --- croniter as an oracle ------------------------------------------------------------------------------

FIELD_RANGES = {"second": (0, 59), "minute": (0, 59), "hour": (0, 23), "dom": (1, 31), "month": (1, 12), "dow": (0, 7)}
MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


@st.composite
def field_value(draw: st.DrawFn, field: str, value: int) -> str:
    """A number, or (for month and day of week) sometimes its name in any case."""
    names = {"month": MONTH_NAMES, "dow": WEEKDAY_NAMES}.get(field)
    if names is None or draw(st.booleans()):
        return str(value)
    name = names[value - 1] if field == "month" else names[value] if value < 7 else None
    if name is None:
        return str(value)
    return draw(st.sampled_from([name, name.upper(), name.title()]))


@st.composite
def field_item(draw: st.DrawFn, field: str) -> str:
    """One list item: a value, a range a-b, a step */n, a-b/n or a/n."""
    low, high = FIELD_RANGES[field]
    kind = draw(st.sampled_from(["value", "range", "star-step", "range-step", "start-step"]))
    if kind == "value":
        return draw(field_value(field, draw(st.integers(low, high))))
    step = draw(st.integers(1, high))
    if kind == "star-step":
        return f"*/{step}"
    if kind == "start-step":  # in the day of week every start 0-7 too: a/n runs to Saturday, 7/n is 0/n
        return f"{draw(field_value(field, draw(st.integers(low, high))))}/{step}"
    # croniter widens an "equal range" a-a to the whole field (its "Jan-Jan" rule); a range a-b here is a
    # through b and a-a is just a. Reversed ranges (croniter wraps them) are errors here by the spec.
    # So ranges are generated with a < b only.
    start = draw(st.integers(low, high - 1))
    end = draw(st.integers(start + 1, high))
    text = f"{draw(field_value(field, start))}-{draw(field_value(field, end))}"
    return text if kind == "range" else f"{text}/{step}"


# Day fields that allow every value without being a bare "*": still restricted for the OR rule.
FULL_DAY_FIELDS = {"dom": ["1-31", "*/1"], "dow": ["0-6", "1-7", "0-7", "sun-sat", "SUN-Sat", "*/1"]}


@st.composite
def every_value(draw: st.DrawFn, field: str) -> str:
    """A day field allowing every value, not as ``*``: a full range, ``*/1``, or a shuffled list of pieces."""
    if draw(st.booleans()):
        return draw(st.sampled_from(FULL_DAY_FIELDS[field]))
    low, high = (1, 31) if field == "dom" else draw(st.sampled_from([(0, 6), (1, 7), (0, 7)]))
    cuts = sorted(draw(st.sets(st.integers(low + 1, high), max_size=4)))
    pieces = []
    for start, end in pairwise([low, *cuts, high + 1]):
        first, last = draw(field_value(field, start)), draw(field_value(field, end - 1))
        pieces.append(first if start == end - 1 else f"{first}-{last}")  # croniter widens a-a to the field
    return ",".join(draw(st.permutations(pieces)))


@st.composite
def field_text(draw: st.DrawFn, field: str) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return "*"
    if kind == 1 and field in FULL_DAY_FIELDS:
        return draw(every_value(field))
    return ",".join(draw(st.lists(field_item(field), min_size=1, max_size=3)))


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    fields = [draw(field_text(name)) for name in ("minute", "hour", "dom", "month", "dow")]
    if draw(st.booleans()):
        fields.insert(0, draw(field_text("second")))
    return " ".join(fields)


def croniter_fire_times(expression: str, start: datetime, count: int) -> list[datetime]:
    six_fields = len(expression.split()) == 6
    iterator = croniter(expression, start, second_at_beginning=six_fields)
    return [iterator.get_next(datetime) for _ in range(count)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    expression=cron_expressions(),
    start=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2060, 12, 31), timezones=st.just(UTC)),
)
def test_fire_times_agree_with_croniter(expression: str, start: datetime) -> None:
    dow = expression.split()[-1]
    try:
        spec = parse_cron(expression)
    except CronSpecError as error:
        # Generated specs are well formed; only a day no allowed month has, with dow "*", is rejected.
        assert "never fires" in str(error)
        assert dow == "*"
        with pytest.raises(CroniterBadDateError):
            croniter_fire_times(expression, start, 1)
        return
    ours = next_fire_times(spec, after=start, count=20)
    assert ours == croniter_fire_times(expression, start, 20)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    expression=cron_expressions(),
    zone=st.sampled_from(["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]),
    start=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2024, 12, 31), timezones=st.just(UTC)),
    probes=st.lists(st.integers(-90_000, 90_000), min_size=1, max_size=12),
)
def test_a_trigger_asked_from_any_instant_in_any_order_answers_as_a_new_trigger_would(
    expression: str, zone: str, start: datetime, probes: list[int]
) -> None:
    # One trigger keeps the minute of its last match between calls; a new trigger per call has nothing kept.
    try:
        spec = parse_cron(expression)
    except CronSpecError:
        return
    kept = CronTrigger(spec, ZoneInfo(zone))
    for seconds in probes:
        probe: datetime | None = start + timedelta(seconds=seconds, microseconds=seconds % 3 * 250_000)
        for _ in range(3):  # from the probe, then from each fire found, as the scheduler asks
            assert probe is not None
            fire = kept.next_after(probe)
            assert fire == CronTrigger(spec, ZoneInfo(zone)).next_after(probe), probe
            probe = fire
            if probe is None:
                break


# --- the DST rule, against a brute-force reference ---------------------------------------------------------

# Days on which clocks change, including 30-minute changes (Lord Howe), half-hour zones (St John's),
# negative DST (Dublin), 45-minute zones (Chatham) and a whole skipped day (Samoa, 2011-12-30).
DST_CHANGE_DAYS = [
    ("Europe/London", date(2024, 3, 31)),
    ("Europe/London", date(2024, 10, 27)),
    ("America/New_York", date(2024, 3, 10)),
    ("America/New_York", date(2024, 11, 3)),
    ("Australia/Sydney", date(2024, 4, 7)),
    ("Australia/Sydney", date(2024, 10, 6)),
    ("Australia/Lord_Howe", date(2024, 4, 7)),
    ("Australia/Lord_Howe", date(2024, 10, 6)),
    ("America/St_Johns", date(2024, 3, 10)),
    ("America/St_Johns", date(2024, 11, 3)),
    ("Europe/Dublin", date(2024, 3, 31)),
    ("Europe/Dublin", date(2024, 10, 27)),
    ("Pacific/Chatham", date(2024, 4, 7)),
    ("Pacific/Chatham", date(2024, 9, 29)),
    ("Pacific/Apia", date(2011, 12, 30)),
]


def day_matches(spec: CronSpec, day: date) -> bool:
    in_days, in_weekdays = day.day in spec.days, day.isoweekday() % 7 in spec.weekdays
    if spec.days_restricted and spec.weekdays_restricted:
        return in_days or in_weekdays
    return in_days and in_weekdays


def reference_fire_instants(spec: CronSpec, zone: ZoneInfo, first_wall: datetime, end_wall: datetime) -> list[datetime]:
    """The documented rule, by brute force over every wall minute: each matching wall time fires at its
    fold=0 instant (the first occurrence of a repeated time; a skipped time shifted forward by the gap),
    and an instant reached by two wall times fires once."""
    instants = set()
    wall = first_wall
    while wall < end_wall:
        if (
            wall.minute in spec.minutes
            and wall.hour in spec.hours
            and wall.month in spec.months
            and day_matches(spec, wall.date())
        ):
            instants.add(wall.replace(tzinfo=zone).astimezone(UTC))
        wall += timedelta(minutes=1)
    return sorted(instants)


def clock_change(zone: ZoneInfo, day: date) -> datetime:
    """The UTC instant of the clock change on (or around) ``day``, to the second."""
    low = datetime.combine(day - timedelta(days=1), datetime.min.time(), UTC)
    high = low + timedelta(days=3)
    assert low.astimezone(zone).utcoffset() != high.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == low.astimezone(zone).utcoffset():
            low = middle
        else:
            high = middle
    return high


@st.composite
def five_field_expressions_for_a_few_days(draw: st.DrawFn) -> str:
    """Five-field specs that usually fire within a few days: dom and dow are often *, month always."""
    day_field = st.one_of(st.just("*"), field_text("dom"))
    weekday_field = st.one_of(st.just("*"), field_text("dow"))
    return " ".join([draw(field_text("minute")), draw(field_text("hour")), draw(day_field), "*", draw(weekday_field)])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expression=five_field_expressions_for_a_few_days(),
    change=st.sampled_from(DST_CHANGE_DAYS),
    start_offset=st.integers(-4 * 3600, 4 * 3600),
    probe_offsets=st.lists(st.integers(-4 * 3600, 4 * 3600), min_size=1, max_size=10),
)
def test_fire_times_across_dst_changes_follow_the_documented_rule(
    expression: str, change: tuple[str, date], start_offset: int, probe_offsets: list[int]
) -> None:
    zone_name, day = change
    zone = ZoneInfo(zone_name)
    spec = parse_cron(expression)
    first_wall = datetime.combine(day - timedelta(days=1), datetime.min.time())
    reference = reference_fire_instants(spec, zone, first_wall, first_wall + timedelta(days=3))
    # Compare well inside the enumerated wall times, whatever the offsets at the edges.
    horizon = (first_wall + timedelta(days=2, hours=18)).replace(tzinfo=zone).astimezone(UTC)
    change_at = clock_change(zone, day)
    start = change_at + timedelta(seconds=start_offset)
    ours = []
    for fire in iter_fire_times(CronTrigger(spec, zone), start):
        if fire >= horizon or len(ours) == 40:
            break
        ours.append(fire.astimezone(UTC))
    assert ours == [instant for instant in reference if start < instant < horizon][:40]
    # Asked from any instant, the next fire is the next one of that sequence.
    for seconds in probe_offsets:
        probe = change_at + timedelta(seconds=seconds)
        expected = next((instant for instant in reference if instant > probe), None)
        if expected is not None and expected < horizon:
            assert in_utc(next_fire_times(spec, after=probe, timezone=zone)) == [expected], probe


# --- zones that never change their offset ------------------------------------------------------------------

# Each fixed zone beside a named zone with the same offset and no change at all after ``since``: the fixed
# zone's fire times are computed as plain arithmetic, the named zone's by the DST-aware search.
FIXED_AND_STEADY = [
    (timezone(timedelta(hours=5, minutes=30)), "Asia/Kolkata", datetime(1946, 1, 1, tzinfo=UTC)),
    (ZoneInfo("Etc/GMT-5"), "Asia/Tashkent", datetime(1992, 1, 1, tzinfo=UTC)),
    (ZoneInfo("Etc/GMT+10"), "Pacific/Honolulu", datetime(1948, 1, 1, tzinfo=UTC)),
    (ZoneInfo("UTC"), "Africa/Abidjan", datetime(1913, 1, 1, tzinfo=UTC)),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    expression=cron_expressions(),
    zones=st.sampled_from(FIXED_AND_STEADY),
    seconds=st.integers(0, 100 * 365 * 86400),
)
def test_a_zone_with_one_fixed_offset_fires_as_the_dst_aware_search_finds(
    expression: str, zones: tuple[timezone | ZoneInfo, str, datetime], seconds: int
) -> None:
    fixed, steady, since = zones
    try:
        spec = parse_cron(expression)
    except CronSpecError:
        return  # a day no allowed month has: never fires, whatever the zone
    start = since + timedelta(seconds=seconds)
    ours = next_fire_times(spec, after=start, count=5, timezone=fixed)
    assert in_utc(ours) == in_utc(next_fire_times(spec, after=start, count=5, timezone=ZoneInfo(steady)))
    assert all(fire.tzinfo is fixed for fire in ours)


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Etc/GMT+3", "Etc/GMT-14", "GMT", "Zulu", "Universal"])
def test_the_fixed_zones_are_recognised_and_fire_at_their_offset(name: str) -> None:
    zone = ZoneInfo(name)
    offset = zone.utcoffset(datetime(2024, 6, 1))
    assert offset is not None
    start = datetime(2024, 6, 1, 12, 0, 30, tzinfo=UTC)
    next_midnight = datetime.combine((start + offset).date() + timedelta(days=1), datetime.min.time())
    [fire] = next_fire_times("0 0 * * *", after=start, timezone=zone)
    assert fire.replace(tzinfo=None) == next_midnight and fire.utcoffset() == offset
    assert fire.astimezone(UTC) == next_midnight.replace(tzinfo=UTC) - offset


def test_asked_again_with_an_equal_time_of_the_other_fold_the_trigger_answers_for_that_instant() -> None:
    zone = ZoneInfo("America/New_York")
    trigger = CronTrigger(parse_cron("*/20 * * * *"), zone)
    first_pass = datetime(2024, 11, 3, 1, 30, tzinfo=zone)  # 05:30 UTC
    second_pass = first_pass.replace(fold=1)  # 06:30 UTC; equal to the first, as times of one zone compare
    assert first_pass == second_pass
    now = datetime(2024, 11, 3, 12, tzinfo=UTC)
    after_first = trigger.get_next_fire_time(first_pass, now)
    after_second = trigger.get_next_fire_time(second_pass, now)
    assert after_first is not None and after_second is not None
    assert after_first.astimezone(UTC) == datetime(2024, 11, 3, 5, 40, tzinfo=UTC)
    assert after_second.astimezone(UTC) == datetime(2024, 11, 3, 7, 0, tzinfo=UTC)  # 02:00 EST
    assert trigger.get_next_fire_time(first_pass, now) == after_first


# -- one parse and one APScheduler trigger per distinct spec ------------------------------------------------------


def test_a_spec_is_parsed_once_and_shared_by_every_job_that_uses_it() -> None:
    assert parse_cron("0 6 * * *", job_name="a") is parse_cron(" 0  6 * * * ", job_name="b")


def test_a_spec_error_names_the_job_asking_even_when_another_asked_before() -> None:
    for job in ("first.job", "second.job"):
        with pytest.raises(CronSpecError, match=f"job '{job}': cron field 'minute' has bad value '61'"):
            parse_cron("61 * * * *", job_name=job)


def test_triggers_of_one_spec_in_any_zone_share_one_apscheduler_trigger(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[dict[str, object]] = []
    original = cron._APSCronTrigger

    def counting(**fields: object) -> object:
        built.append(fields)
        return original(**fields)

    monkeypatch.setattr(cron, "_APSCronTrigger", counting)
    spec = parse_cron("7 13 3 3 *")  # a spec no other test uses
    after = datetime(2026, 1, 1, tzinfo=UTC)
    fires = {zone: CronTrigger(spec, ZoneInfo(zone)).next_after(after)
             for _ in range(100) for zone in ("UTC", "Asia/Tokyo", "America/New_York")}

    assert len(built) == 1
    assert fires["Asia/Tokyo"] == datetime(2026, 3, 3, 13, 7, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert fires["America/New_York"] == datetime(2026, 3, 3, 13, 7, tzinfo=ZoneInfo("America/New_York"))
