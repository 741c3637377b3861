"""The Scheduled tasks page's histogram of waiting tasks by due time and task type (issue 10), through the test
client, on the django:// backend's table in SQLite, PostgreSQL and MariaDB; none for another backend."""

from __future__ import annotations

import html
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from mutexcron_django.admin.task_chart import pending_charts
from mutexcron_django.models import ScheduledTask

TASKS_URL = "/admin/mutexcron/scheduledtask/"
BAR = re.compile(r'<rect class="mx-series-\d+" x="([\d.]+)"[^>]*data-series="([^"]+)" data-count="(\d+)">')


def task(alias: str, task_type: str, due: datetime, status: str = "scheduled") -> None:
    now = timezone.now()
    ScheduledTask.objects.using(alias).create(id=uuid.uuid4().hex, task_type=task_type, payload="{}", run_at=due,
                                              due=due, status=status, created_at=now, updated_at=now)


def bars(svg_text: str) -> list[tuple[int, str, int]]:
    """(bar number, series, count) of every segment of a histogram (bars 18 wide, 4 apart)."""
    return [(round(float(x) / 22), series, int(count)) for x, series, count in BAR.findall(svg_text)]


@pytest.mark.parametrize("alias", [
    pytest.param(alias, marks=pytest.mark.django_db(databases=sorted({"default", alias})))
    for alias in ("default", "postgres", "mariadb")])
def test_waiting_tasks_by_due_time_and_type(alias: str, admin_client: Client, settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "TASKS": {"BACKEND": "django" if alias == "default" else
                                                        f"django://{alias}"}}
    now = timezone.now()
    for minutes in (-30, -1, 2, 3, 12, 59):
        task(alias, "mail.send", now + timedelta(minutes=minutes))
    task(alias, "sms.send", now + timedelta(minutes=7))
    task(alias, "sms.send", now + timedelta(hours=5, minutes=30))
    task(alias, "sms.send", now + timedelta(hours=30))  # after the next day: not shown
    task(alias, "mail.send", now + timedelta(minutes=3), status="failed")  # not waiting
    task(alias, "mail.send", now + timedelta(minutes=3), status="running")

    hour, day = pending_charts(alias, now)

    assert (hour.title, hour.total, hour.totals) == ("Due in the next hour", 7, {"mail.send": 6, "sms.send": 1})
    assert [bar.label for bar in hour.bars][:1] == ["now"] and len(hour.bars) == 13
    assert [sum(bar.counts.values()) for bar in hour.bars] == [2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert len(day.bars) == 25 and day.totals == {"mail.send": 6, "sms.send": 2}
    assert [sum(bar.counts.values()) for bar in day.bars][:7] == [2, 5, 0, 0, 0, 0, 1]
    assert "Due in the next hour: 7 tasks waiting (mail.send 6, sms.send 1); the most, 2, due by" in hour.summary

    page = html.unescape(admin_client.get(TASKS_URL).content.decode())
    charts = re.findall(r'<figure class="mutexcron-pending-chart" data-total="(\d+)">(.*?)</figure>', page, re.S)
    assert [total for total, _ in charts] == ["7", "8"]
    assert bars(charts[0][1]) == [(0, "mail.send", 2), (1, "mail.send", 2), (2, "sms.send", 1), (3, "mail.send", 1),
                                  (12, "mail.send", 1)]
    assert 'role="img" aria-label="Due in the next hour: 7 tasks waiting' in charts[0][1]
    assert "mail.send: 1 task due" in charts[0][1]  # a segment's hover


@pytest.mark.django_db
def test_no_histogram_for_another_backend(admin_client: Client, settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "TASKS": {"BACKEND": "redis://127.0.0.1:1/0"}}
    task("default", "mail.send", timezone.now())

    page = admin_client.get(TASKS_URL).content.decode()

    assert "mutexcron-pending-chart" not in page and "Read only" in page


@pytest.mark.django_db
def test_an_empty_queue_says_so(admin_client: Client) -> None:
    page = html.unescape(admin_client.get(TASKS_URL).content.decode())

    assert "Due in the next hour: no task waiting." in page and "Due in the next day: no task waiting." in page
