"""Fixtures of the web console tests: a real headless Chromium driven by Selenium.

The browser is Debian's `chromium` with its `chromium-driver` (/usr/bin/chromedriver);
scripts/ensure_browser.sh installs them when missing (once per session). Selenium is given
the driver's path, so it never looks for or downloads one. Screenshots go to a folder under
.run/web-artifacts/ that the session prints.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENSURE_BROWSER = ROOT / "scripts" / "ensure_browser.sh"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ENSURE_TIMEOUT_S = 900
PAGE_LOAD_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def artifacts(request) -> Path:
    folder = ROOT / ".run" / "web-artifacts" / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    line = f"web console screenshots: {folder}"
    if reporter is not None:
        reporter.write_line(line)
    request.addfinalizer(lambda: reporter is not None and reporter.write_line(line))
    return folder


@pytest.fixture(scope="session")
def browser() -> Iterator:
    done = subprocess.run(
        ["sh", str(ENSURE_BROWSER)], capture_output=True, text=True, timeout=ENSURE_TIMEOUT_S
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/ensure_browser.sh failed:\n{done.stderr[-4000:]}")
    # Selenium Manager would look for (and may download) a driver: never.
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # tests may run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[dict]:
    """The browser console's errors since the last call (the log is drained by reading)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait_page(driver, url: str, condition: Callable[[object], object], timeout_s: float, what: str):
    """Load `url` again and again until `condition(driver)` is truthy; fail after the
    deadline with `what` and the page's text."""
    deadline = time.monotonic() + timeout_s
    while True:
        driver.get(url)
        value = condition(driver)
        if value:
            return value
        if time.monotonic() >= deadline:
            text = driver.find_element("tag name", "body").text
            raise AssertionError(f"timed out after {timeout_s}s waiting for: {what}\n{text}")
        time.sleep(0.5)
