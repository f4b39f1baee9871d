"""Open a dashboard page in real headless Chromium (Selenium + chromedriver), offline, and report what rendered."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

#: For every panel: its state and, per chart, the SVG's on-screen size and how many drawn marks have a
#: non-zero bounding box (a chart whose marks are all empty or invisible counts as blank).
PANELS_JS = """
return Array.from(document.querySelectorAll('section.panel')).map(function (p) {
  return {
    id: p.dataset.panel,
    state: p.dataset.state,
    charts: Array.from(p.querySelectorAll('svg.chart')).map(function (svg) {
      var r = svg.getBoundingClientRect();
      var marks = Array.from(svg.querySelectorAll('.mark'));
      var drawn = marks.filter(function (m) { var b = m.getBBox(); return b.width > 0 || b.height > 0; });
      return {width: r.width, height: r.height, marks: marks.length, drawn: drawn.length};
    }),
    rows: p.querySelectorAll('.numbers tbody tr').length,
    empty_text: (p.querySelector('.empty') || {}).textContent || ''
  };
});
"""


@dataclass(frozen=True)
class BrowserReport:
    panels: list[dict[str, Any]]
    console: list[dict[str, Any]]  # browser log entries at SEVERE level (console errors, failed loads)
    page_errors: list[str]  # uncaught exceptions, caught by a hook installed before the page loads
    title: str


def available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


@contextmanager
def chromium(width: int = 1440, height: int = 900, flags: Sequence[str] = (), local: bool = False) -> Iterator[Any]:
    """A headless Chromium with the flags from STACK.md, a fresh profile, and no network at all (with `local`,
    nothing but 127.0.0.1, for a server under test); `flags` are added (e.g. a fake microphone)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="flywheel-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--host-resolver-rules=MAP * ~NOTFOUND" + (", EXCLUDE 127.0.0.1" if local else ""),
        *flags,
    ):  # any external URL would fail, and log an error
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


ERROR_HOOK = (
    "window.__errors = []; window.addEventListener('error', function (e) {"
    " window.__errors.push(String(e.message || (e.target && (e.target.src || e.target.href)))); }, true);"
)


def inspect_page(driver: Any, html: Path, screenshot: Path | None = None, width: int = 1440) -> BrowserReport:
    """Load `html` from file:// in `driver`, collect per-panel rendering facts and console errors, and save a
    full-page screenshot when asked."""
    driver.get_log("browser")  # drop entries from earlier pages
    driver.set_window_size(width, 900)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ERROR_HOOK})
    driver.get(html.resolve().as_uri())
    panels = driver.execute_script(PANELS_JS)
    errors = driver.execute_script("return window.__errors;")
    if screenshot is not None:
        full = driver.execute_script("return document.documentElement.scrollHeight;")
        driver.set_window_size(width, min(int(full) + 140, 16000))
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(screenshot))
    logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    return BrowserReport(panels, logs, list(errors or []), driver.title)


def blank_panels(report: BrowserReport) -> list[str]:
    """Panels that did not render a visible chart: not 'ok', no SVG, a tiny SVG, or no mark with a size."""
    bad = []
    for p in report.panels:
        charts = p["charts"]
        if p["state"] != "ok":
            bad.append(f"{p['id']}: state {p['state']}")
        elif not charts:
            bad.append(f"{p['id']}: no chart")
        else:
            for i, c in enumerate(charts):
                if c["width"] < 200 or c["height"] < 100:
                    bad.append(f"{p['id']}[{i}]: chart is {c['width']:.0f}x{c['height']:.0f} px")
                elif c["drawn"] == 0:
                    bad.append(f"{p['id']}[{i}]: blank chart ({c['marks']} marks, none with a size)")
    return bad
