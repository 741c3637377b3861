"""In headless Chromium (issue 33): a user who may re-time jobs (``retime_lock``) and see the run-time schedules
re-times a run-time schedule from the Locks page, but is offered no edit on the Run-time schedules page, and its
change form is refused: what the schedule calls stays as it was.

The live server's store is a Redis URL of this test's own; Chromium and chromedriver are Debian's, as in
test_admin_browser.py, whose browser fixture this uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from mutexcron.definitions import ScheduleDefinition
from mutexcron.stores import LockState, require_control, store_from_url
from mutexcron_django.runtime import build_scheduler
from tests.django.schedule_targets import SEND, targets  # noqa: F401  (a fixture)
from tests.django.test_admin_browser import browser, pytestmark  # noqa: F401  (fixture, skip mark)
from tests.django.test_admin_control_browser import login, save_page

NAME = "browser.weekly_digest"


@pytest.mark.django_db(transaction=True)
def test_a_retimer_retimes_a_run_time_schedule_but_cannot_edit_what_it_calls(
    live_server: Any, browser: Any, settings: Any, redis_url: str, django_user_model: Any,  # noqa: F811
    targets: list[str], tmp_path: Path,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": redis_url}
    scheduler = build_scheduler()
    try:
        scheduler.add_schedule(NAME, "0 7 * * 1", SEND, kwargs={"to": "ops@example.com"}, by="setup")
    finally:
        scheduler.shutdown()
    retimer = django_user_model.objects.create_user("retimer", password="correct horse", is_staff=True)
    retimer.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="mutexcron", codename__in=["view_lock", "retime_lock", "view_schedule"]))
    wait = WebDriverWait(browser, 15)

    def state() -> LockState:
        with store_from_url(redis_url) as store:
            found = require_control(store, "read the schedule").lock(NAME)
        assert found is not None and found.definition is not None
        return found

    def job_row() -> Any:
        return browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{NAME}"]')

    try:
        login(browser, wait, live_server.url, "retimer", "correct horse", job=NAME)

        # Re-timed from the Locks page: an override of its spec, by the retimer.
        job_row().find_element(By.CSS_SELECTOR, 'input[name="change_schedule"]').click()
        wait.until(lambda d: d.find_elements(By.ID, "id_spec"))
        spec = browser.find_element(By.ID, "id_spec")
        spec.clear()
        spec.send_keys("0 9 * * 1")
        browser.find_element(By.ID, "mutexcron-confirm").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{NAME}"]')
                   and "Schedule overridden" in job_row().text)
        assert state().schedule == "0 9 * * 1" and state().schedule_by == "retimer"

        # The Run-time schedules page: listed, but no edit link, Edit, Disable or Delete.
        browser.get(f"{live_server.url}/admin/mutexcron/schedule/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-schedule="{NAME}"]'))
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-schedule="{NAME}"]')
        assert not row.find_elements(By.CSS_SELECTOR, 'a[href$="/change/"], input[name="disable"], .mutexcron-delete')
        assert not browser.find_elements(By.ID, "mutexcron-add-schedule")

        # Its change form, opened by URL, is refused.
        browser.get(f"{live_server.url}/admin/mutexcron/schedule/{NAME}/change/")
        wait.until(lambda d: "403" in d.title or "Forbidden" in d.page_source)
        assert not browser.find_elements(By.ID, "id_target")
        definition = ScheduleDefinition.from_json(state().definition or "")
        assert (definition.target, definition.kwargs) == (SEND, {"to": "ops@example.com"})
    except BaseException:
        save_page(browser, tmp_path / "admin-permissions-browser-failure", "the failure")
        raise
