"""The Timeline in headless Chromium (issue 10): a job with a known history of 96 ticks (succeeded, failed,
missed, paused, caught up, skipped, pending) shows one cell per tick in the right state, with its hover title,
in the admin's light and dark themes (the cells' colours follow the theme's CSS variables); the Locks page
shows its small strip. Screenshots are saved as test artefacts in test-artifacts/timeline-py3.N/ (printed
paths); with MUTEXCRON_UPDATE_DOCS=1 the light one is also written to docs/timeline.png, the README's picture.

Chromium and chromedriver are Debian's, as in test_admin_browser.py, whose browser fixture this uses.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone

from mutexcron_django.models import ScheduledTask
from tests.django.jobhelpers import Declarations
from tests.django.test_admin_browser import ROOT, browser, pytestmark  # noqa: F401  (fixture, skip mark)
from tests.django.timeline_history import known_history

JOB = "reports.refresh_dashboards"
STATES = (["succeeded"] * 18 + ["failed", "failed"] + ["succeeded"] * 9 + ["missed"] + ["succeeded"] * 8
          + ["paused"] * 8 + ["succeeded"] * 10 + ["missed", "missed", "caught_up"] + ["succeeded"] * 6
          + ["skipped"] + ["succeeded"] * 6 + ["timed_out"] + ["succeeded"] * 7 + ["unrecorded"] + ["succeeded"] * 6
          + ["replaced"] + ["succeeded"] * 7 + ["pending"])


def artifacts(kind: str = "timeline") -> Path:
    """Where the screenshots are kept after the run: $MUTEXCRON_TEST_ARTIFACTS, else test-artifacts/ (ignored by
    git) at the repository's root; one folder per test and Python version, as the CI runs two suites at once."""
    folder = Path(os.environ.get("MUTEXCRON_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    folder /= f"{kind}-py{sys.version_info.major}.{sys.version_info.minor}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save(driver: Any, path: Path, what: str, element: Any = None) -> None:
    (element or driver).screenshot(str(path)) if element is not None else driver.save_screenshot(str(path))
    print(f"screenshot of {what}: {path}")


def update_docs(shot: Path, picture: str) -> None:
    """With MUTEXCRON_UPDATE_DOCS=1, ``shot`` becomes docs/``picture``."""
    if os.environ.get("MUTEXCRON_UPDATE_DOCS") == "1":
        shutil.copyfile(shot, ROOT / "docs" / picture)
        print(f"updated {ROOT / 'docs' / picture}")


def save_failure(driver: Any, shots: Path, stem: str) -> None:
    """The page as it was when the test failed: a screenshot and its HTML."""
    save(driver, shots / f"{stem}.png", "the failure")
    (shots / f"{stem}.html").write_text(driver.page_source)


@pytest.mark.django_db(transaction=True)
def test_the_timeline_shows_one_cell_per_tick_in_both_themes(live_server: Any, browser: Any,  # noqa: F811
                                                             django_user_model: Any, declare: Declarations,
                                                             settings: Any) -> None:
    import django.contrib.admin
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots = artifacts()

    # The live server serves STATIC_ROOT (the test site has no staticfiles app): the admin's own CSS, themes
    # included, so that the screenshots show the pages as they look.
    settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")

    assert len(STATES) == 96
    known = known_history(declare, STATES, job=JOB, every=timedelta(minutes=10))
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    wait = WebDriverWait(browser, 15)
    url = f"{live_server.url}/admin/mutexcron/lock/{quote(JOB)}/timeline/"
    try:
        browser.get(url)
        wait.until(lambda d: d.find_elements(By.ID, "id_username"))
        browser.find_element(By.ID, "id_username").send_keys("operator")
        browser.find_element(By.ID, "id_password").send_keys("correct horse")
        browser.find_element(By.CSS_SELECTOR, 'form#login-form input[type="submit"]').click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#mutexcron-timeline-strip rect.mx-cell"))

        cells = browser.find_elements(By.CSS_SELECTOR, "#mutexcron-timeline-strip rect.mx-cell")
        shown = [(datetime.fromisoformat(cell.get_attribute("data-tick")), cell.get_attribute("data-state"))
                 for cell in cells]
        assert shown == list(zip(known.ticks, STATES, strict=True))
        failed = cells[STATES.index("failed")]
        hover = failed.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        assert "failed on " in hover and "s late, took" in hover and "ValueError: boom" in hover
        strip = browser.find_element(By.CSS_SELECTOR, "#mutexcron-timeline-strip svg")
        assert strip.get_attribute("role") == "img"
        assert strip.get_attribute("aria-label").startswith(f"Last 96 ticks of job {JOB}")
        assert strip.size["width"] <= browser.find_element(By.ID, "content-main").size["width"]

        def fills() -> dict[str, str]:
            script = ("return Object.fromEntries(['succeeded','failed','missed','paused','caught_up','timed_out',"
                      "'replaced'].map(s => "
                      "[s, getComputedStyle(document.querySelector('#mutexcron-timeline-strip .mx-' + s)).fill]))")
            result: dict[str, str] = browser.execute_script(script)
            return result

        browser.execute_script("document.documentElement.dataset.theme = 'light'")
        light = fills()
        assert len(set(light.values())) == 7, light  # seven states, seven colours (timed_out, replaced their own)
        figure = browser.find_element(By.ID, "content")
        save(browser, shots / "timeline-light.png", "the timeline (light theme)")
        save(browser, shots / "timeline-light-figure.png", "the timeline's pictures (light theme)", figure)

        browser.execute_script("document.documentElement.dataset.theme = 'dark'")
        dark = fills()
        assert dark != light and len(set(dark.values())) == 7, dark
        body = browser.execute_script("return getComputedStyle(document.documentElement).getPropertyValue("
                                      "'--body-bg').trim()")
        assert body == "#121212", body  # the admin's dark theme is on
        save(browser, shots / "timeline-dark.png", "the timeline (dark theme)")
        save(browser, shots / "timeline-dark-figure.png", "the timeline's pictures (dark theme)", figure)

        browser.execute_script("document.documentElement.dataset.theme = 'light'")
        browser.get(f"{live_server.url}/admin/mutexcron/lock/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{JOB}"] rect.mx-cell'))
        small = browser.find_elements(By.CSS_SELECTOR, f'tr[data-job="{JOB}"] rect.mx-cell')
        assert [cell.get_attribute("data-state") for cell in small] == STATES[-30:]
        save(browser, shots / "locks.png", "the Locks page")

        # The Scheduled tasks page's histogram of waiting tasks, by due time and type.
        now = timezone.now()
        for number in range(60):
            due = now + timedelta(minutes=number * 7 % 55 - 3, hours=number % 3 * number % 20)
            ScheduledTask.objects.create(id=uuid.uuid4().hex, task_type=("mail.send", "sms.send", "report.build")
                                         [number % 3], payload="{}", run_at=due, due=due, status="scheduled",
                                         created_at=now, updated_at=now)
        browser.get(f"{live_server.url}/admin/mutexcron/scheduledtask/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".mutexcron-pending-chart rect"))
        charts = browser.find_elements(By.CSS_SELECTOR, ".mutexcron-pending-chart")
        totals = [int(chart.get_attribute("data-total")) for chart in charts]
        assert totals[1] == 60 and 0 < totals[0] < 60, totals
        for chart, total in zip(charts, totals, strict=True):  # the bars drawn add up to what the chart says
            drawn = chart.find_elements(By.CSS_SELECTOR, "rect[data-count]")
            assert sum(int(segment.get_attribute("data-count")) for segment in drawn) == total
        save(browser, shots / "scheduled-tasks.png", "the Scheduled tasks page",
             browser.find_element(By.ID, "mutexcron-pending"))
        update_docs(shots / "timeline-light-figure.png", "timeline.png")
    except BaseException:
        save_failure(browser, shots, "timeline-failure")
        raise
