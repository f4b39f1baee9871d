"""The dashboard reads a lake on S3 (moto server) the same way as a local one."""

from __future__ import annotations

import pytest

from dashboards.render import build_page
from tests.dashboards.demo_lake import build_demo_lake


@pytest.mark.s3
def test_dashboard_on_s3_lake(s3_lake, tmp_path) -> None:
    totals = build_demo_lake(s3_lake, rounds=3, episodes=300, seed=5)
    page = build_page(s3_lake)
    assert {p.state for p in page.panels} == {"ok"}, [(p.id, p.message) for p in page.panels if p.state != "ok"]
    assert f'<div class="v">{totals.sft:,}</div><div class="l">SFT pile</div>' in page.html
    assert str(s3_lake.uri) in page.html
