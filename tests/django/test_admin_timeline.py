"""The admin's pictures (issue 10), through the test client: a job's Timeline has one cell per nominal tick in
the state of what happened (succeeded, failed, missed, paused, caught up, skipped, unrecorded, pending,
running), with hover titles, a sparkline of durations and a table; the Locks page shows a small strip and the
overdue and failing badges; the windows (24 hours, 200 ticks) and the floors (lock created, schedule changed)."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.test import Client

from mutexcron import Outcome
from mutexcron_django import history
from mutexcron_django.models import JobRun, Lock, PauseSpan
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations
from tests.django.session_zone import session_time_zone
from tests.django.timeline_history import EXPECTED, JOB, duration, fire, known_history

LOCKS_URL = "/admin/mutexcron/lock/"
CELL = re.compile(r'<rect class="mx-cell mx-(\w+)"[^>]*data-tick="([^"]+)" data-state="(\w+)"><title>([^<]*)</title>')

pytestmark = pytest.mark.django_db


def timeline_url(name: str) -> str:
    return f"/admin/mutexcron/lock/{quote(name)}/timeline/"


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response
    return response.content.decode()


def section(text: str, start: str, end: str = "</figure>") -> str:
    begin = text.index(start)
    return text[begin:text.index(end, begin)]


def cells(svg: str) -> list[tuple[datetime, str, str]]:
    """(tick, state, hover title) of every cell of a strip, left to right; each cell's class agrees."""
    found = []
    for css_state, tick, state, title in CELL.findall(svg):
        assert css_state == state
        found.append((datetime.fromisoformat(tick), state, html.unescape(title)))
    return found


def test_the_timeline_has_one_cell_per_tick_in_the_state_of_what_happened(admin_client: Client,
                                                                         declare: Declarations) -> None:
    known = known_history(declare)

    text = page(admin_client, timeline_url(JOB))

    strip = section(text, 'id="mutexcron-timeline-strip"')
    found = cells(strip)
    assert [tick for tick, _, _ in found] == known.ticks
    assert [state for _, state, _ in found] == EXPECTED
    titles = [title for _, _, title in found]
    assert "succeeded on web-1, +0.004 s late, took 1.000 s" in titles[0]
    assert "fired by 3: web-2 +0.010s, web-3 +0.410s, web-1 +0.004s" in titles[0]
    assert "failed on web-2, +0.014 s late, took 1.148 s" in titles[1] and "ValueError: boom" in titles[1]
    assert "missed: no instance ran it" in titles[2]
    assert "paused" in titles[3]
    assert "caught up" in titles[5] and "+330.500 s late" in titles[5]
    assert "skipped_busy on web-1: lock held by web-9:1" in titles[6]
    assert "taken, but no outcome was recorded" in titles[9] and "fired by 2" in titles[9]
    assert "not run yet; missed if no instance runs it by" in titles[10]
    # Accessible: a role, a label in words, a title; the table says the same as the strip.
    assert re.search(r'<svg [^>]*class="mutexcron-svg mutexcron-strip" role="img" aria-label="Last 11 ticks of '
                     rf'job {JOB}, [^"]+: 2 succeeded, 1 failed, 1 caught up, 2 missed, 1 skipped, 2 paused, 1 '
                     r'taken, no outcome recorded, 1 pending\."', strip), strip[:400]
    assert "<title>Last 11 ticks" in strip
    rows = re.findall(r'<tr class="mutexcron-tick" data-tick="([^"]+)" data-state="(\w+)">', text)
    assert [(datetime.fromisoformat(tick), state) for tick, state in rows] == list(zip(known.ticks, EXPECTED,
                                                                                        strict=True))
    legend = html.unescape(section(text, 'id="mutexcron-legend"', "</ul>"))
    assert "Succeeded: 2" in legend and "Missed: 2" in legend and "Paused: 2" in legend
    # The sparkline: a dot per run (4 ran), labelled by its spread.
    durations = section(text, 'id="mutexcron-timeline-durations"')
    assert durations.count('<circle class="mx-dot"') == 4
    took = sorted(duration(number) for number in (0, 1, 5, 7))
    assert f"min {took[0]:.3f} s, median {(took[1] + took[2]) / 2:.3f} s, max {took[3]:.3f} s" in durations
    assert "<script" not in text.split('id="content-main"')[1]  # drawn on the server, no script


def test_a_tick_whose_lock_is_held_for_it_is_running(admin_client: Client, declare: Declarations) -> None:
    known = known_history(declare)
    latest = known.ticks[-1]
    store = DjangoLockStore()
    assert store.acquire(JOB, owner="web-1", lease=timedelta(minutes=5), fire_time=latest).acquired
    history.write(fire(latest, "web-2", Outcome.SKIPPED_ALREADY_RAN))

    found = cells(section(page(admin_client, timeline_url(JOB)), 'id="mutexcron-timeline-strip"'))

    assert [state for _, state, _ in found] == [*EXPECTED[:-1], "running"]
    assert "running now" in found[-1][2]


def test_the_locks_page_has_a_small_strip_linking_the_timeline_and_no_badge_when_healthy(
    admin_client: Client, declare: Declarations
) -> None:
    known_history(declare)

    text = page(admin_client, LOCKS_URL)

    start = text.index(f'data-job="{JOB}"')
    row = text[start:text.index("</tr>", start)]
    assert [state for _, state, _ in cells(row)] == EXPECTED
    assert f'href="{timeline_url(JOB)}"' in row
    assert "data-problem" not in row


def test_overdue_and_failing_badges_on_the_locks_page_and_the_timeline(admin_client: Client,
                                                                       declare: Declarations) -> None:
    known = known_history(declare)
    Lock.objects.filter(name=JOB).update(last_fire_time=known.ticks[5], last_outcome="failed",
                                         last_error="ValueError: boom")

    locks = page(admin_client, LOCKS_URL)
    timeline = html.unescape(page(admin_client, timeline_url(JOB)))

    start = locks.index(f'data-job="{JOB}"')
    row = locks[start:locks.index("</tr>", start)]
    assert re.findall(r'data-problem="(\w+)"', row) == ["overdue", "failing"]
    assert re.findall(r'data-problem="(\w+)"', timeline) == ["overdue", "failing"]
    assert f"no instance ran the tick of {known.ticks[6].isoformat()}" in timeline
    assert "ValueError: boom" in timeline


def test_a_per_second_job_shows_its_last_200_ticks(admin_client: Client, declare: Declarations) -> None:
    declare("* * * * * *", name="timeline.every_second", alert_after=timedelta(seconds=5))
    DjangoLockStore().seed(["timeline.every_second"])
    Lock.objects.filter(name="timeline.every_second").update(created_at=datetime.now(UTC) - timedelta(hours=2))

    found = cells(section(page(admin_client, timeline_url("timeline.every_second")), 'id="mutexcron-timeline-strip"'))
    small = cells(page(admin_client, LOCKS_URL).split('data-job="timeline.every_second"')[1].split("</tr>")[0])

    assert len(found) == 200 and len(small) == 30
    assert all(b - a == timedelta(seconds=1) for (a, _, _), (b, _, _) in pairwise(found))
    assert all(b - a == timedelta(seconds=1) for (a, _, _), (b, _, _) in pairwise(small))
    assert small[-1][0] >= found[-1][0]  # read a moment later
    assert {state for _, state, _ in found[:-15]} == {"missed"}  # nothing ran; the newest are within their delay


def test_a_job_that_alerts_at_once_shows_every_unrun_tick_as_missed(admin_client: Client,
                                                                    declare: Declarations) -> None:
    """``alert_after=timedelta(0)``: as the Overdue badge says, a tick nobody ran is missed as soon as it passed."""
    declare("* * * * * *", name="timeline.at_once", alert_after=timedelta(0), lease=30)
    DjangoLockStore().seed(["timeline.at_once"])
    Lock.objects.filter(name="timeline.at_once").update(created_at=datetime.now(UTC) - timedelta(minutes=5))

    found = cells(section(page(admin_client, timeline_url("timeline.at_once")), 'id="mutexcron-timeline-strip"'))

    assert len(found) == 200 and {state for _, state, _ in found} == {"missed"}


def test_an_hourly_job_shows_its_last_24_hours(admin_client: Client, declare: Declarations) -> None:
    declare("0 * * * *", name="timeline.hourly")
    DjangoLockStore().seed(["timeline.hourly"])
    Lock.objects.filter(name="timeline.hourly").update(created_at=datetime.now(UTC) - timedelta(days=3))

    found = cells(section(page(admin_client, timeline_url("timeline.hourly")), 'id="mutexcron-timeline-strip"'))

    assert len(found) == 24
    assert datetime.now(UTC) - timedelta(hours=24) < found[0][0] and found[-1][0] <= datetime.now(UTC)


def test_ticks_count_from_the_lock_creation_and_the_last_schedule_change(admin_client: Client,
                                                                        declare: Declarations) -> None:
    declare("0 * * * *", name="timeline.changed")
    store = DjangoLockStore()
    store.seed(["timeline.changed"])
    now = datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)  # the latest tick of both schedules
    half = hour.replace(minute=30) if now.minute >= 30 else hour
    Lock.objects.filter(name="timeline.changed").update(created_at=hour - timedelta(hours=5, minutes=-1))
    assert len(cells(page(admin_client, timeline_url("timeline.changed")))) == 5  # the hours after the creation

    store.set_schedule("timeline.changed", "*/30 * * * *")
    Lock.objects.filter(name="timeline.changed").update(schedule_changed_at=half - timedelta(hours=2, minutes=-1))
    found = cells(page(admin_client, timeline_url("timeline.changed")))  # the half hours since the change

    assert len(found) == 4 and all(tick.minute in (0, 30) for tick, _, _ in found)
    assert {tick.minute for tick, _, _ in found} == {0, 30}


def test_a_declared_job_without_a_lock_and_an_undeclared_name(admin_client: Client, declare: Declarations) -> None:
    declare("0 * * * *", name="timeline.no_lock_yet")

    text = page(admin_client, timeline_url("timeline.no_lock_yet"))
    undeclared = admin_client.get(timeline_url("timeline.not_declared"), follow=True)

    assert "This job has no lock yet" in text and "mx-cell" not in text
    assert undeclared.redirect_chain and "no job of that name is declared" in undeclared.content.decode()


def test_the_job_page_links_its_timeline(admin_client: Client, declare: Declarations) -> None:
    known_history(declare)

    text = page(admin_client, f"/admin/mutexcron/lock/{quote(JOB)}/history/")

    assert f'href="{timeline_url(JOB)}" id="mutexcron-timeline-link"' in text


def test_the_timeline_needs_the_view_permission(client: Client, django_user_model: Any,
                                                declare: Declarations) -> None:
    known_history(declare)
    user = django_user_model.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(timeline_url(JOB)).status_code == 403

    user.user_permissions.add(Permission.objects.get(content_type__app_label="mutexcron", codename="view_lock"))
    assert client.get(timeline_url(JOB)).status_code == 200


class HistoryOnPostgreSQL:
    """A database router: the run history and pause spans live in ``postgres``, the locks in ``default``."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return "postgres" if model in (JobRun, PauseSpan) else None

    db_for_write = db_for_read


@pytest.mark.django_db(transaction=True, databases=["default", "postgres"])
def test_the_timeline_reads_the_history_in_utc_whatever_the_postgresql_session_zone(
    admin_client: Client, declare: Declarations, settings: Any
) -> None:
    settings.DATABASE_ROUTERS = [f"{__name__}.HistoryOnPostgreSQL"]
    with session_time_zone("postgres", "Asia/Kathmandu"):  # +05:45
        known = known_history(declare)
        assert JobRun.objects.using("postgres").filter(job_name=JOB).exists()
        found = cells(section(page(admin_client, timeline_url(JOB)), 'id="mutexcron-timeline-strip"'))

    assert [(tick, state) for tick, state, _ in found] == list(zip(known.ticks, EXPECTED, strict=True))
    assert "took 1.000 s" in found[0][2]


def test_a_job_in_its_own_zone_shows_its_ticks_there_and_keys_them_in_utc(admin_client: Client,
                                                                          declare: Declarations) -> None:
    declare("30 9 * * *", name="timeline.paris", timezone="Europe/Paris")
    DjangoLockStore().seed(["timeline.paris"])
    Lock.objects.filter(name="timeline.paris").update(created_at=datetime.now(UTC) - timedelta(days=3))

    found = cells(section(page(admin_client, timeline_url("timeline.paris")), 'id="mutexcron-timeline-strip"'))

    assert len(found) == 1
    tick, _, title = found[0]
    assert tick.utcoffset() == timedelta(0) and tick.astimezone(ZoneInfo("Europe/Paris")).hour == 9
    assert title.startswith(tick.astimezone(ZoneInfo("Europe/Paris")).strftime("%Y-%m-%d 09:30:00 CE"))


def test_timed_out_and_replaced_runs_have_their_own_states_and_a_skipped_late_tick_is_a_skip(
        admin_client: Client, declare: Declarations) -> None:
    known = known_history(declare, ["missed", "missed", "missed", "succeeded"])
    timed_out, replaced, late = known.ticks[:3]
    for record in (fire(timed_out, "web-1", Outcome.TIMED_OUT, took=2.0, error="timed out: past its timeout"),
                   fire(timed_out, "web-2", Outcome.SKIPPED_ALREADY_RAN),
                   fire(replaced, "web-2", Outcome.REPLACED, took=1.0),
                   fire(late, "web-3", Outcome.SKIPPED_ALREADY_RAN),
                   fire(late, "web-1", Outcome.SKIPPED_LATE, error="later than its start_deadline")):
        history.write(record)

    strip = section(page(admin_client, timeline_url(JOB)), 'id="mutexcron-timeline-strip"')
    found = cells(strip)

    assert [state for _, state, _ in found] == ["timed_out", "replaced", "skipped", "succeeded"]
    assert 'class="mx-cell mx-timed_out"' in strip and 'class="mx-cell mx-replaced"' in strip
    assert "timed out (told to stop after its timeout) on web-1" in found[0][2] and "past its timeout" in found[0][2]
    assert "replaced (told to stop for a newer tick) on web-2" in found[1][2]
    assert "skipped_late on web-1: later than its start_deadline" in found[2][2]
