"""The Locks page's backfill action (issue 21): a form first, a range refused on it before anything runs, a valid
one backfilled in a background thread of the web process whose runs reach the history, and its permission."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client

from mutexcron import JobContext
from mutexcron.stores import LockStore
from mutexcron_django.models import JobRun
from tests.django.jobhelpers import Declarations
from tests.django.test_admin import redis_store  # noqa: F401  (a fixture)
from tests.django.test_admin_control import LOCKS_URL, row_of, text
from tests.support import wait_until

BACKFILL_URL = LOCKS_URL + "backfill/"
JOB = "control.backfilled"
MIDNIGHT = datetime(2026, 1, 5, tzinfo=UTC)
pytestmark = pytest.mark.django_db(transaction=True)  # the background thread writes the history on its own


@pytest.fixture
def ticks(declare: Declarations, redis_store: LockStore) -> list[JobContext]:  # noqa: F811
    """JOB, hourly in Europe/Paris, on the test's Redis store; the contexts of its runs."""
    contexts: list[JobContext] = []
    declare("0 * * * *", contexts.append, name=JOB, timezone="Europe/Paris")
    return contexts


def test_the_locks_page_offers_a_backfill_to_whoever_may_run_a_job(admin_client: Client,
                                                                    ticks: list[JobContext]) -> None:
    assert 'name="backfill"' in row_of(text(admin_client.get(LOCKS_URL)), JOB)


def test_backfill_shows_the_range_form_first(admin_client: Client, ticks: list[JobContext]) -> None:
    page = text(admin_client.post(BACKFILL_URL, {"name": JOB}))

    assert 'id="id_start"' in page and 'id="id_end"' in page and "Yes, backfill" in page and ticks == []


def test_a_range_of_more_than_10000_ticks_is_refused_on_the_form(admin_client: Client,
                                                                 ticks: list[JobContext]) -> None:
    response = admin_client.post(BACKFILL_URL, {"name": JOB, "start": "2021-01-01", "end": "2023-01-01",
                                                "confirm": "yes"})

    assert response.status_code == 200 and "more than 10000 ticks" in text(response)
    assert not LogEntry.objects.exists() and ticks == []


def test_a_range_ending_after_the_stores_now_is_refused_on_the_form_naming_both(
        admin_client: Client, ticks: list[JobContext], redis_store: LockStore) -> None:  # noqa: F811
    end = (redis_store.now() + timedelta(days=1)).replace(microsecond=0)
    response = admin_client.post(BACKFILL_URL, {"name": JOB, "start": (end - timedelta(days=2)).isoformat(),
                                                "end": end.isoformat(), "confirm": "yes"})

    page = text(response)
    assert response.status_code == 200 and f"end {end.isoformat()} is after the lock store's now (" in page
    assert not LogEntry.objects.exists() and ticks == []


def test_a_backfill_runs_in_the_background_and_its_runs_reach_the_history(admin_client: Client,
                                                                         ticks: list[JobContext]) -> None:
    response = admin_client.post(BACKFILL_URL, {"name": JOB, "start": "2026-01-05T01:00", "end": "2026-01-05T04:00",
                                                "confirm": "yes"}, follow=True)

    page = text(response)
    assert "Backfill of 3 tick(s) from 2026-01-05T01:00:00+01:00 to 2026-01-05T04:00:00+01:00 started" in page
    wait_until(lambda: JobRun.objects.filter(job_name=JOB).count() == 3, timeout=10, what="the backfilled runs")
    rows = JobRun.objects.filter(job_name=JOB).order_by("fire_time")
    assert [(row.fire_time, row.backfill, row.outcome) for row in rows] == [
        (MIDNIGHT + timedelta(hours=hour), True, "succeeded") for hour in range(3)]
    assert LogEntry.objects.get().object_id == JOB and [ctx.fire_time for ctx in ticks] == [r.fire_time for r in rows]


def test_a_user_who_may_not_run_jobs_may_not_backfill(django_user_model: Any, ticks: list[JobContext]) -> None:
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="mutexcron", codename="view_lock"))
    viewer = Client()
    viewer.force_login(user)

    assert viewer.post(BACKFILL_URL, {"name": JOB}).status_code == 403
    assert 'name="backfill"' not in text(viewer.get(LOCKS_URL))
