"""Acceptance: the page built from a demo lake opens in real headless Chromium, offline, every panel draws a
visible chart with no console errors, and a screenshot is saved. A blanked chart is caught."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dashboards import render_dashboard
from dashboards.spec import load_panels
from tests.dashboards.browser import blank_panels, inspect_page

pytestmark = pytest.mark.slow  # a real browser: about 10-20 s on 2 cores with the demo lake


def test_every_panel_renders_in_chromium(demo_lake, browser, tmp_path: Path) -> None:
    lake, _ = demo_lake
    page = render_dashboard(lake, tmp_path / "dashboard.html")
    shot = tmp_path / "dashboard.png"
    report = inspect_page(browser, page, shot)

    assert [p["id"] for p in report.panels] == [s.id for s in load_panels()]
    assert blank_panels(report) == []
    assert report.console == [], report.console
    assert report.page_errors == []
    assert report.title.startswith("Flywheel dashboard")
    for p in report.panels:
        assert p["rows"] > 0, f"{p['id']}: no numbers beneath the chart"
    # the screenshot is a real full page, not a white rectangle
    img = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert img.shape[0] > 2000 and img.shape[1] >= 1400
    assert img.std() > 10


def test_page_is_self_contained(demo_lake, tmp_path: Path) -> None:
    lake, _ = demo_lake
    html = render_dashboard(lake, tmp_path / "d.html").read_text()
    assert "<script" not in html.lower()
    urls = set(re.findall(r"""(?:src|href)\s*=\s*["']([^"'#][^"']*)""", html))
    assert urls == set(), urls  # only in-page anchors
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) <= {"http://www.w3.org/2000/svg"}


def test_blank_chart_is_caught(demo_lake, browser, tmp_path: Path) -> None:
    """Negative control: empty one chart's marks, and hide another's; the browser check must name both."""
    lake, _ = demo_lake
    html = render_dashboard(lake, tmp_path / "d.html").read_text()
    sections = html.split('<section class="panel')
    # panel 1: drop every mark; panel 2: keep marks but give them no size
    sections[1] = re.sub(r'<(polygon|path|circle|rect) class="mark[^"]*"[^>]*>.*?</\1>', "", sections[1], flags=re.S)
    sections[2] = sections[2].replace('class="mark ', 'style="display:none" class="mark ')
    broken = tmp_path / "broken.html"
    broken.write_text('<section class="panel'.join(sections))
    bad = blank_panels(inspect_page(browser, broken))
    ids = [s.id for s in load_panels()]
    assert any(b.startswith(f"{ids[0]}") and "blank" in b for b in bad), bad
    assert any(b.startswith(f"{ids[1]}") and "blank" in b for b in bad), bad
    assert len(bad) == 2


def test_empty_lake_shows_what_to_do(lake, browser, tmp_path: Path) -> None:
    page = render_dashboard(lake, tmp_path / "empty.html")
    report = inspect_page(browser, page, tmp_path / "empty.png")
    specs = {s.id: s for s in load_panels()}
    assert report.console == [] and report.page_errors == []
    for p in report.panels:
        assert p["state"] == "empty", p
        assert p["charts"] == []
        first_command = re.search(r"`([^`]+)`", specs[p["id"]].empty)
        assert first_command and first_command.group(1) in p["empty_text"]
