"""Audits in real headless Chromium: 20 verdicts recorded through the pages show in `flywheel audit report`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboards.browser import available, chromium
from tests.workbench.conftest import client
from tests.workbench.lakes import routed_round
from tests.workbench.pages import full_shot, login, page_errors, shots_dir, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="needs chromium and chromedriver")]


def test_twenty_verdicts_through_the_page_show_in_the_audit_report(server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from typer.testing import CliRunner

    from flywheel.cli import app

    b, base = server
    assert routed_round(b.lake) >= 20
    shots = shots_dir(tmp_path)
    # an annotator may not see the audit pages
    alice = client(b, "alice")
    assert alice.get("/audit").status_code == 403
    assert alice.post("/api/audit/sample", json={"round": 1, "n": 5}).status_code == 403
    with chromium(1300, 900, local=True) as d:
        login(d, base, "otto")
        d.get(f"{base}/audit")
        for k, v in (("round", "1"), ("n", "20"), ("seed", "7")):
            el = d.find_element(By.ID, k)
            el.clear()
            el.send_keys(v)
        d.find_element(By.CSS_SELECTOR, "#sample button[type=submit]").click()
        for i in range(20):
            wait_for(lambda i=i: d.find_element(By.CSS_SELECTOR, f"#audit[data-index='{i}']"), what=f"episode {i}")
            assert d.find_elements(By.CSS_SELECTOR, ".verdict-table tbody tr td.pass, .verdict-table tbody tr td.fail")
            imgs = d.find_elements(By.CSS_SELECTOR, "img.audit-shot")
            assert imgs and all(d.execute_script("return arguments[0].naturalWidth", im) > 0 for im in imgs)
            if i == 0:
                full_shot(d, shots / "audit.png")
            verdict = "bad" if i % 5 == 4 else "good"
            d.find_element(By.ID, "note").send_keys(f"note {i}")
            d.find_element(By.CSS_SELECTOR, f"button.verdict[data-verdict='{verdict}']").click()
        wait_for(lambda: d.find_element(By.ID, "sample"), what="the audit home after the last episode")
        full_shot(d, shots / "audit-home.png")
        assert not page_errors(d)
    audits = b.lake.read("audits").to_pylist()
    assert len(audits) == 20 and {a["auditor"] for a in audits} == {"otto"}
    assert sum(a["verdict"] == "bad" for a in audits) == 4
    assert {a["note"] for a in audits} == {f"note {i}" for i in range(20)}
    r = CliRunner().invoke(app, ["audit", "report", "--lake", str(b.lake.uri), "--format", "csv"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith('"round",'))
    assert line.startswith('"round",1,,,20,16,0.8,'), r.output
