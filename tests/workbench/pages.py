"""Driving workbench pages in real headless Chromium (tests/dashboards/browser.py's offline flags)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.workbench.conftest import PASSWORD


def shots_dir(tmp_path: Path) -> Path:
    """Where page screenshots go: $WORKBENCH_SHOTS (docs/workbench/ when refreshing the docs) or the test's folder."""
    d = Path(os.environ.get("WORKBENCH_SHOTS") or tmp_path / "shots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def wait_for(fn: Callable[[], Any], timeout: float = 120.0, what: str = "the page") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except Exception:  # noqa: BLE001 - the element is not there yet
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def login(driver: Any, base: str, user: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/login")
    driver.find_element(By.ID, "username").send_keys(user)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    wait_for(lambda: driver.find_elements(By.ID, "logout"), what="the login to finish")


def page_errors(driver: Any) -> list[dict]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def click_at(driver: Any, element: Any, x: int, y: int) -> None:
    """A real mouse click at screenshot pixel (x, y) of an <img> shown at its natural size."""
    from selenium.webdriver.common.action_chains import ActionChains

    w, h = element.size["width"], element.size["height"]
    ActionChains(driver).move_to_element_with_offset(element, x - w // 2, y - h // 2).click().perform()


def full_shot(driver: Any, path: Path) -> None:
    """A screenshot of the whole page (the window grown to its height), for the docs and for looking at."""
    w = driver.get_window_size()["width"]
    h = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.set_window_size(w, min(int(h) + 140, 6000))
    driver.save_screenshot(str(path))
