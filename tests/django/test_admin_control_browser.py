"""End to end in headless Chromium (issue 9): an operator pauses a job, sees its badge, resumes it, changes its
schedule with the preview and resets it; a user without the permissions sees no control and gets 403.

The live server's store is a Redis URL of this test's own; Chromium and chromedriver are Debian's, as in
test_admin_browser.py, whose browser fixture this uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import django.contrib.admin
import pytest
from django.contrib.auth.models import Permission

from mutexcron.stores import LockState, store_from_url
from tests.django.test_admin_browser import browser, declare_job, pytestmark  # noqa: F401  (fixtures, skip mark)

JOB = "browser.control_report"  # declared as "0 3 * * *"


def login(driver: Any, wait: Any, base_url: str, username: str, password: str, job: str = JOB) -> None:
    """Log in through the admin's form, landing on the Locks page (once ``job``'s row is there)."""
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(f"{base_url}/admin/mutexcron/lock/")
    wait.until(lambda d: d.find_elements(By.ID, "id_username"))
    driver.find_element(By.ID, "id_username").send_keys(username)
    driver.find_element(By.ID, "id_password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, 'form#login-form input[type="submit"]').click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{job}"]'))


def save_page(driver: Any, stem: Path, what: str) -> None:
    """A screenshot (``stem``.png) and the HTML (``stem``.html) of the page, and where they are."""
    driver.save_screenshot(str(stem.with_suffix(".png")))
    stem.with_suffix(".html").write_text(driver.page_source)
    print(f"screenshot of {what}: {stem.with_suffix('.png')}")


@pytest.mark.django_db(transaction=True)
def test_operator_pauses_resumes_and_reschedules_a_job_and_a_viewer_cannot(
    live_server: Any, browser: Any, settings: Any, redis_url: str, django_user_model: Any,  # noqa: F811
    declare_job: Callable[[str], None], tmp_path: Path,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": redis_url}
    # The live server serves STATIC_ROOT (the test site has no staticfiles app): the admin's CSS, so that the
    # screenshots show the pages as they look.
    settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")
    declare_job(JOB)
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    viewer = django_user_model.objects.create_user("viewer", password="battery staple", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(content_type__app_label="mutexcron",
                                                           codename__in=["view_lock", "change_lock"]))
    wait = WebDriverWait(browser, 15)

    def row() -> Any:
        return browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{JOB}"]')

    def click(css: str) -> None:
        row().find_element(By.CSS_SELECTOR, css).click()
        wait.until(lambda d: d.find_elements(By.ID, "mutexcron-control-form"))

    def confirm_and_wait_for(condition: Callable[[Any], Any]) -> None:
        browser.find_element(By.ID, "mutexcron-confirm").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{JOB}"]') and condition(d))

    def state() -> LockState:
        with store_from_url(redis_url) as store:
            found = store.lock(JOB)
        assert found is not None
        return found

    def badges(driver: Any) -> str:
        return " ".join(badge.text for badge in driver.find_elements(By.CSS_SELECTOR, ".mutexcron-badge"))

    try:
        login(browser, wait, live_server.url, "operator", "correct horse")
        assert "At 03:00" in row().find_element(By.CLASS_NAME, "mutexcron-spec").text
        assert row().find_element(By.CLASS_NAME, "mutexcron-spec").get_attribute("title").count("\n") == 5

        # Pause for 2h30m with a note: a form first, then the badge and the paused line with the note.
        click('input[name="pause"]')
        browser.find_element(By.ID, "id_duration").send_keys("2h30m")
        browser.find_element(By.ID, "id_note").send_keys("warehouse migration, INC-4411")
        confirm_and_wait_for(lambda d: "Paused until" in badges(d))
        paused_line = row().find_element(By.CLASS_NAME, "mutexcron-paused-line").text
        assert "by operator" in paused_line and "warehouse migration, INC-4411" in paused_line
        assert state().paused and state().paused_by == "operator"
        assert state().pause_note == "warehouse migration, INC-4411"
        save_page(browser, tmp_path / "admin-paused-with-note", "the paused job and its note")

        # Resume.
        click('input[name="resume"]')
        confirm_and_wait_for(lambda d: "Paused" not in badges(d))
        assert not state().paused

        # Change the schedule: a bad spec is refused on the form, a good one previewed, then saved.
        click('input[name="change_schedule"]')
        assert browser.find_element(By.ID, "mutexcron-code-spec-cell").text == "0 3 * * *"
        spec = browser.find_element(By.ID, "id_spec")
        spec.clear()
        spec.send_keys("0 3 * * 8")
        browser.find_element(By.ID, "mutexcron-confirm").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".errorlist"))
        assert state().schedule is None
        spec = browser.find_element(By.ID, "id_spec")
        spec.clear()
        spec.send_keys("*/20 9-17 * * *")
        browser.find_element(By.ID, "mutexcron-preview-button").click()
        wait.until(lambda d: d.find_elements(By.ID, "mutexcron-preview"))
        assert len(browser.find_elements(By.CSS_SELECTOR, ".mutexcron-preview-fire")) == 5
        assert "Every 20 minutes" in browser.find_element(By.ID, "mutexcron-preview-description").text
        browser.execute_script("document.getElementById('mutexcron-preview').scrollIntoView();")
        save_page(browser, tmp_path / "admin-change-schedule-preview", "the schedule preview")
        confirm_and_wait_for(lambda d: "Schedule overridden" in badges(d))
        assert "Every 20 minutes" in row().find_element(By.CLASS_NAME, "mutexcron-spec").text
        assert state().schedule == "*/20 9-17 * * *" and state().schedule_by == "operator"

        # Reset it to the code's.
        click('input[name="reset_schedule"]')
        confirm_and_wait_for(lambda d: "Schedule overridden" not in badges(d))
        assert state().schedule is None

        # The job's page lists every change, by whom.
        row().find_element(By.CSS_SELECTOR, "th.mutexcron-name a").click()
        wait.until(lambda d: d.find_elements(By.ID, "change-history"))
        changes = [line.text for line in browser.find_elements(By.CSS_SELECTOR, "tr.mutexcron-change")]
        assert len(changes) == 4 and all("operator" in change for change in changes)
        assert "Schedule reset" in changes[0] and changes[-1].split("operator", 1)[1].strip().startswith("Paused")

        # A viewer: no control on the page, and a forged POST is refused.
        login(browser, wait, live_server.url, "viewer", "battery staple")
        assert not row().find_elements(By.CSS_SELECTOR, 'input[name="pause"], input[name="change_schedule"]')
        assert not browser.find_elements(By.ID, "mutexcron-bulk")
        browser.execute_script(
            "const form = document.createElement('form'); form.method = 'post'; form.action = arguments[0];"
            "for (const [k, v] of Object.entries(arguments[1])) { const i = document.createElement('input');"
            "i.type = 'hidden'; i.name = k; i.value = v; form.appendChild(i); }"
            "document.body.appendChild(form); form.submit();",
            f"{live_server.url}/admin/mutexcron/lock/pause/",
            {"name": JOB, "confirm": "yes", "csrfmiddlewaretoken": browser.get_cookie("csrftoken")["value"]},
        )
        wait.until(lambda d: "403" in d.title or "Forbidden" in d.page_source)
        assert not state().paused
    except BaseException:
        save_page(browser, tmp_path / "admin-control-browser-failure", "the failure")
        raise
