"""Headless Chromium for the admin's browser tests, and what they do with it.

Needs Debian's ``chromium`` and ``chromium-driver`` (``scripts/test`` installs them and
sets ``OUTBOX_REQUIRE_BROWSER=1``, which turns a missing browser into a failure rather
than a skip).  With ``OUTBOX_SCREENSHOTS_DIR`` set, :meth:`Browser.screenshot` saves
whole pages there as PNGs (``scripts/screenshots`` makes ``docs/img/`` that way).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
#: The width the console must fit, with the admin's navigation sidebar open.
WIDTH = 1400
#: Seconds a page or an element is waited for (a loaded, shared machine).
WAIT = 30


class Browser:
    """A Selenium driver pointed at a live server, with the few steps the tests take."""

    def __init__(self, driver: Any, base: str) -> None:
        self.driver = driver
        self.base = base

    def get(self, path: str) -> None:
        """Open ``path`` of the live server."""
        self.driver.get(self.base + path)

    def wait_for(self, css: str) -> Any:
        """The element ``css`` once it is on the page."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as shown
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, WAIT).until(
            shown.presence_of_element_located((By.CSS_SELECTOR, css))
        )

    def until(self, condition: Any, seconds: float = WAIT) -> Any:
        """Wait until ``condition(driver)`` is true; its value.

        A page that reloads itself replaces its elements while the condition reads them,
        so an element gone stale or not yet there counts as "not yet", not as a failure.
        """
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(
            self.driver,
            seconds,
            poll_frequency=0.25,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        ).until(condition)

    def find(self, css: str) -> Any:
        """The first element ``css``."""
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        """Every element ``css``."""
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self, css: str) -> str:
        """The visible text of ``css``."""
        return str(self.find(css).text)

    def js(self, script: str, *args: Any) -> Any:
        """Run ``script`` in the page."""
        return self.driver.execute_script(script, *args)

    def log_in(self, username: str, password: str) -> None:
        """Log in through the admin's login form."""
        self.get("/admin/login/")
        self.find("input[name=username]").send_keys(username)
        self.find("input[name=password]").send_keys(password)
        self.find("input[type=submit]").click()
        self.wait_for("#logout-form")

    def messages(self) -> list[tuple[str, str]]:
        """The admin's messages on the page, as ``(level, text)``."""
        return [
            (str(item.get_attribute("class")), str(item.text))
            for item in self.find_all("ul.messagelist li")
        ]

    def fits(self, css: str = "html") -> bool:
        """Whether ``css`` (the page by default) needs no horizontal scrolling."""
        return bool(
            self.js(
                "const e = document.querySelector(arguments[0]);"
                "return e.scrollWidth <= e.clientWidth;",
                css,
            )
        )

    def screenshot(self, name: str) -> None:
        """Save the whole page as ``name``.png when ``OUTBOX_SCREENSHOTS_DIR`` is set."""
        folder = os.environ.get("OUTBOX_SCREENSHOTS_DIR")
        if not folder:
            return
        height = self.js("return document.documentElement.scrollHeight")
        self.driver.set_window_size(WIDTH, min(max(height + 140, 800), 3000))
        Path(folder).mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(Path(folder) / f"{name}.png"))
        self.driver.set_window_size(WIDTH, 1000)


@contextmanager
def chromium(base: str) -> Iterator[Browser]:
    """A headless Chromium, :data:`WIDTH` px wide, pointed at ``base``."""
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
    options.add_argument(f"--window-size={WIDTH},1000")
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield Browser(driver, base)
    finally:
        driver.quit()
