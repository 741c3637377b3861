"""The Run-time schedules page in headless Chromium (issue 21): an operator adds a schedule through the form (a bad
kwargs refused on its field first), sees it listed with its cron in words, disables it, and sees it on the Locks
page as a job. Screenshots in both admin themes are kept in test-artifacts/schedules-py3.N/ (printed paths); with
MUTEXCRON_UPDATE_DOCS=1 the light one is also written to docs/schedules.png.

The live server's store is a Redis URL of this test's own; Chromium and chromedriver are Debian's, as in
test_admin_browser.py, whose browser fixture this uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mutexcron.stores import store_from_url
from tests.django.schedule_targets import SEND, targets  # noqa: F401  (a fixture)
from tests.django.test_admin_browser import browser, pytestmark  # noqa: F401  (fixture, skip mark)
from tests.django.test_timeline_browser import artifacts, save, save_failure, update_docs

NAME = "reports.weekday_digest"


@pytest.mark.django_db(transaction=True)
def test_an_operator_adds_a_schedule_sees_its_cron_in_words_and_disables_it(
    live_server: Any, browser: Any, settings: Any, redis_url: str, django_user_model: Any,  # noqa: F811
    targets: list[str],  # noqa: F811
) -> None:
    import django.contrib.admin
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": redis_url}
    settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")  # the admin's own CSS
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    wait = WebDriverWait(browser, 15)
    shots = artifacts("schedules")

    def row() -> Any:
        return browser.find_element(By.CSS_SELECTOR, f'tr[data-schedule="{NAME}"]')

    def fill(field: str, value: str) -> None:
        element = browser.find_element(By.ID, f"id_{field}")
        element.clear()
        element.send_keys(value)

    try:
        browser.get(f"{live_server.url}/admin/mutexcron/schedule/")
        wait.until(lambda d: d.find_elements(By.ID, "id_username"))
        browser.find_element(By.ID, "id_username").send_keys("operator")
        browser.find_element(By.ID, "id_password").send_keys("correct horse")
        browser.find_element(By.CSS_SELECTOR, 'form#login-form input[type="submit"]').click()
        wait.until(lambda d: d.find_elements(By.ID, "mutexcron-add-schedule"))

        # The form: the target from the allowed ones; kwargs that do not fit it are refused on their field.
        browser.find_element(By.ID, "mutexcron-add-schedule").click()
        wait.until(lambda d: d.find_elements(By.ID, "mutexcron-schedule-form"))
        fill("name", NAME)
        Select(browser.find_element(By.ID, "id_target")).select_by_value(SEND)
        fill("spec", "30 7 * * 1-5")
        fill("kwargs", '{"to": "ops@example.com", "cc": "me"}')
        fill("timezone", "Europe/Paris")
        browser.find_element(By.ID, "mutexcron-save").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".field-kwargs.errors"))
        assert "unexpected keyword argument 'cc'" in browser.find_element(By.CSS_SELECTOR, ".field-kwargs").text
        assert "At 07:30, Monday through Friday" in browser.find_element(By.ID, "mutexcron-spec-description").text
        with store_from_url(redis_url) as store:
            assert store.lock(NAME) is None
        fill("kwargs", '{"to": "ops@example.com", "copies": 2}')
        browser.find_element(By.ID, "mutexcron-save").click()

        # Listed with its cron in words, enabled.
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-schedule="{NAME}"]'))
        assert "At 07:30, Monday through Friday" in row().find_element(By.CLASS_NAME, "mutexcron-spec").text
        assert row().find_element(By.CLASS_NAME, "mutexcron-state").text == "Enabled"
        assert '"copies": 2' in row().find_element(By.CLASS_NAME, "mutexcron-kwargs").text
        assert len(row().find_elements(By.CSS_SELECTOR, ".mutexcron-fires li")) == 3

        # Disabled: paused on every instance, by the operator.
        row().find_element(By.CSS_SELECTOR, 'input[name="disable"]').click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-schedule="{NAME}"][data-enabled="0"]'))
        assert "by operator" in row().find_element(By.CLASS_NAME, "mutexcron-state").text
        with store_from_url(redis_url) as store:
            state = store.lock(NAME)
        assert state is not None and state.paused and state.paused_by == "operator"
        assert state.definition is not None and state.schedule_by == "operator"

        if browser.find_elements(By.ID, "toggle-nav-sidebar"):
            browser.find_element(By.ID, "toggle-nav-sidebar").click()  # the whole table in the picture
        browser.execute_script("document.documentElement.dataset.theme = 'light'")
        save(browser, shots / "schedules-light.png", "the Run-time schedules page (light theme)")
        browser.execute_script("document.documentElement.dataset.theme = 'dark'")
        save(browser, shots / "schedules-dark.png", "the Run-time schedules page (dark theme)")
        browser.execute_script("document.documentElement.dataset.theme = 'light'")

        # On the Locks page it is a job, marked as a run-time schedule, paused.
        browser.find_element(By.ID, "mutexcron-locks-link").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-job="{NAME}"]'))
        badges = browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{NAME}"] th.mutexcron-name').text
        assert "Run-time schedule" in badges and "Paused" in badges
        assert not browser.find_elements(By.CSS_SELECTOR, f'tr[data-job="{NAME}"].mutexcron-orphan')
        update_docs(shots / "schedules-light.png", "schedules.png")
    except BaseException:
        save_failure(browser, shots, "schedules-failure")
        raise
