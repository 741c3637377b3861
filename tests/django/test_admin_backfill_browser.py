"""End to end in headless Chromium (issue 21): an operator backfills a range of a job's ticks from the Locks page;
a reversed range is refused on the form, a good one runs in the background and its runs show in the history.

The live server's store is a Redis URL of this test's own; Chromium and chromedriver are Debian's, as in
test_admin_browser.py, whose browser fixture this uses.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mutexcron import JobContext
from mutexcron_django.models import JobRun
from tests.django.jobhelpers import Declarations
from tests.django.test_admin_browser import browser, pytestmark  # noqa: F401  (fixture, skip mark)
from tests.django.test_admin_control_browser import login, save_page
from tests.support import wait_until

JOB = "browser.backfilled"  # hourly in Europe/Paris
MIDNIGHT = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_operator_backfills_a_range_and_sees_its_runs_in_the_history(
    live_server: Any, browser: Any, settings: Any, redis_url: str, django_user_model: Any,  # noqa: F811
    declare: Declarations, tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": redis_url}
    ticks: list[JobContext] = []
    declare("0 * * * *", ticks.append, name=JOB, timezone="Europe/Paris")
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    wait = WebDriverWait(browser, 15)

    def fill(start: str, end: str) -> None:
        for field, value in (("id_start", start), ("id_end", end)):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(value)
        browser.find_element(By.ID, "mutexcron-confirm").click()

    try:
        login(browser, wait, live_server.url, "operator", "correct horse", job=JOB)
        browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{JOB}"] input[name="backfill"]').click()
        wait.until(lambda d: d.find_elements(By.ID, "mutexcron-control-form"))

        # A reversed range: refused on the form, nothing runs.
        fill("2026-01-05T04:00", "2026-01-05T01:00")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".errornote, .errorlist"))
        assert "end must be after start" in browser.page_source and ticks == []
        browser.execute_script("document.getElementById('mutexcron-control-form').scrollIntoView();")
        save_page(browser, tmp_path / "admin-backfill-form", "the backfill form refusing a reversed range")

        # Three hours in the job's zone: started in the background, said so, and run.
        fill("2026-01-05T01:00", "2026-01-05T04:00")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "ul.messagelist li.success"))
        message = browser.find_element(By.CSS_SELECTOR, "ul.messagelist li.success").text
        assert "Backfill of 3 tick(s) from 2026-01-05T01:00:00+01:00 to 2026-01-05T04:00:00+01:00 started" in message
        browser.execute_script("document.querySelector('ul.messagelist').scrollIntoView();")
        save_page(browser, tmp_path / "admin-backfill-started", "the backfill's message")
        wait_until(lambda: JobRun.objects.filter(job_name=JOB).count() == 3, timeout=15, what="the backfilled runs")
        assert [ctx.fire_time for ctx in ticks] == [MIDNIGHT + timedelta(hours=hour) for hour in range(3)]

        browser.get(f"{live_server.url}/admin/mutexcron/jobrun/?job_name={JOB}&backfill__exact=1")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#result_list tbody tr"))
        assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 3
        browser.execute_script("document.getElementById('result_list').scrollIntoView();")
        save_page(browser, tmp_path / "admin-backfill-history", "the backfilled runs in the history")
    except BaseException:
        save_page(browser, tmp_path / "admin-backfill-browser-failure", "the failure")
        raise
