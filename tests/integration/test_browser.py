"""The admin in a real browser: headless Chromium, driven by Selenium.

Logs in, reads the overview, opens the failed deliveries, runs the requeue
action and checks the page and the rows.  Needs Debian's ``chromium`` and
``chromium-driver`` (``scripts/test`` installs them and sets
``OUTBOX_REQUIRE_BROWSER=1``, which turns a missing browser into a failure
rather than a skip).  With ``OUTBOX_SCREENSHOTS_DIR`` set, the pages are saved
there as PNGs (``docs/img/`` holds the ones the docs show).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_outbox.models import Delivery, DeliveryState
from tests.integration.sample_outbox import fill

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium, 1400 px wide."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        message = "chromium and chromium-driver are not installed (apt-get install them)"
        if os.environ.get("OUTBOX_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> None:
    """Save the whole page as ``name``.png when ``OUTBOX_SCREENSHOTS_DIR`` is set."""
    folder = os.environ.get("OUTBOX_SCREENSHOTS_DIR")
    if not folder:
        return
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(height + 120, 800), 3000))
    Path(folder).mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(Path(folder) / f"{name}.png"))
    driver.set_window_size(1400, 1000)


def test_overview_and_requeue_in_a_browser(browser: Any, live_server: Any, admin_user: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def wait_for(css: str) -> Any:
        return WebDriverWait(browser, 30).until(
            shown.presence_of_element_located((By.CSS_SELECTOR, css))
        )

    counts = fill()
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for("#logout-form")

    browser.get(f"{live_server.url}/admin/django_outbox/")
    browser.find_element(By.LINK_TEXT, "Overview").click()
    wait_for("#outbox-cards")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Outbox overview"
    assert browser.find_element(By.ID, "queued").text == f"{counts['queued']:,}".replace(",", "")
    assert browser.find_element(By.ID, "failing-hosts").text == "2"
    assert browser.find_element(By.ID, "open-breakers").text == "1"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-day svg rect")) > 24
    assert "dead.example" in browser.find_element(By.ID, "failing").text
    assert "post-1042" in browser.find_element(By.ID, "batches").text
    screenshot(browser, "overview")

    browser.find_element(By.CSS_SELECTOR, "#by-state a[href*='state=failed']").click()
    wait_for("#result_list")
    assert "state=failed" in browser.current_url
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    failed = counts["failed"]
    assert len(rows) == min(failed, 100)
    screenshot(browser, "deliveries")

    browser.find_element(By.ID, "action-toggle").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("requeue")
    browser.find_element(By.NAME, "index").click()
    message = wait_for("ul.messagelist li.success").text
    selected = min(failed, 100)
    assert message == f"Requeued {selected} deliveries."
    assert Delivery.objects.filter(state=DeliveryState.FAILED).count() == failed - selected
    browser.get(f"{live_server.url}/admin/django_outbox/delivery/?state=failed")
    wait_for("#changelist")
    remaining = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(remaining) == failed - selected
