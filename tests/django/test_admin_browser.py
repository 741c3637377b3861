"""End to end in a real headless browser: log in, see a lock held by another OS process, force-unlock it.

Chromium and chromedriver are Debian's (/usr/bin); their paths are given explicitly, so Selenium Manager
never runs and nothing is downloaded. The other process holds the lock in Redis (the live server's
MUTEXCRON['STORE'] is overridden to the same Redis URL) and keeps renewing it until a renewal fails.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mutexcron import default_registry, mutex_cron
from mutexcron.stores import store_from_url

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ROOT = Path(__file__).resolve().parents[2]
JOB = "browser.nightly_report"

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason=f"needs Debian's {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)",
)

# The other process: takes the job's lock (a manual acquisition, as run_now does) and renews it every
# 0.3 s, as a running job's heartbeat would, until a renewal finds the lock gone.
HOLDER = r"""
import os, sys, time
from datetime import timedelta
from mutexcron.stores import store_from_url

url, name = sys.argv[1], sys.argv[2]
store = store_from_url(url)
owner = f"other-process:{os.getpid()}"
lease = timedelta(seconds=30)
acquisition = store.acquire(name, owner=owner, lease=lease, fire_time=None)
if not acquisition.acquired:
    print("busy", acquisition.holder, flush=True)
    sys.exit(1)
print("held", owner, flush=True)
deadline = time.monotonic() + 110
while time.monotonic() < deadline:
    time.sleep(0.3)
    if not store.renew(name, token=acquisition.token, lease=lease):
        print("lost", flush=True)
        sys.exit(0)
store.release(name, token=acquisition.token)
print("gave up", flush=True)
"""


class Holder:
    """The holding process, with its output lines in a queue (read by a thread, so waits can time out)."""

    def __init__(self, store_url: str, name: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, store_url, name],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def next_line(self, timeout: float = 15) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the holder process said nothing for {timeout} s") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def declare_job() -> Iterator[Callable[[str], None]]:
    """Declare jobs into mutexcron.default_registry for this test only."""
    declared: list[str] = []

    def declare(name: str) -> None:
        mutex_cron("0 3 * * *", name=name)(lambda: None)
        declared.append(name)

    yield declare
    for name in declared:
        default_registry.remove(name)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.django_db(transaction=True)
def test_operator_force_unlocks_a_lock_held_by_another_process(
    live_server: Any, browser: Any, settings: Any, redis_url: str, django_user_model: Any,
    declare_job: Callable[[str], None], tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": redis_url}
    declare_job(JOB)
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    holder = Holder(redis_url, JOB)
    wait = WebDriverWait(browser, 15)

    def row() -> Any:
        return browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{JOB}"]')

    try:
        first = holder.next_line()
        assert first.startswith("held other-process:"), first
        owner = first.split()[1]

        # Log in through the form; the admin sends us on to the Locks page.
        browser.get(f"{live_server.url}/admin/mutexcron/lock/")
        wait.until(lambda driver: driver.find_elements(By.ID, "id_username"))
        browser.find_element(By.ID, "id_username").send_keys("operator")
        browser.find_element(By.ID, "id_password").send_keys("correct horse")
        browser.find_element(By.CSS_SELECTOR, 'form#login-form input[type="submit"]').click()
        wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, f'tr[data-job="{JOB}"]'))

        # The lock is held by the other process.
        assert row().get_attribute("data-status") == "held"
        assert row().find_element(By.CLASS_NAME, "mutexcron-holder").text == owner
        assert row().find_element(By.CLASS_NAME, "mutexcron-status").text == "Locked"

        # Force unlock: a confirmation page first, naming the holder.
        row().find_element(By.CSS_SELECTOR, 'input[name="force_unlock"]').click()
        wait.until(lambda driver: driver.find_elements(By.ID, "mutexcron-confirm-unlock"))
        assert owner in browser.find_element(By.ID, "mutexcron-unlock-holder").text
        browser.find_element(By.ID, "mutexcron-confirm-unlock").click()

        # Back on the Locks page: unlocked, with a message.
        wait.until(lambda driver: driver.find_elements(By.CSS_SELECTOR, f'tr[data-job="{JOB}"][data-status="free"]'))
        assert row().find_element(By.CLASS_NAME, "mutexcron-status").text == "Free"
        assert row().find_element(By.CLASS_NAME, "mutexcron-holder").text == "-"
        messages = browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text
        assert f"Force-unlocked “{JOB}” (it was held by {owner})" in messages

        # The store agrees, and the holder's next renewal found its lock gone.
        with store_from_url(redis_url) as store:
            state = store.lock(JOB)
        assert state is not None and not state.locked
        assert holder.next_line() == "lost"
    except BaseException:
        screenshot = tmp_path / "admin-browser-failure.png"
        browser.save_screenshot(str(screenshot))
        (tmp_path / "admin-browser-failure.html").write_text(browser.page_source)
        print(f"screenshot of the failure: {screenshot}")
        raise
    finally:
        holder.stop()
