"""Fixtures for the dashboard tests: a demo lake with every table filled, and one headless Chromium per module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dashboards.demo_lake import DemoTotals, build_demo_lake


@pytest.fixture
def demo_lake(lake) -> tuple[Any, DemoTotals]:
    """The `lake` fixture filled with 6 rounds and 3,000 episodes of consistent synthetic history."""
    return lake, build_demo_lake(lake, rounds=6, episodes=3000, seed=3, chunks=2)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from tests.dashboards.browser import available, chromium

    if not available():
        msg = "chromium and chromedriver are not installed (apt-get install -y chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(msg)  # .ci/run installs them: a missing browser in CI is a broken setup, not a skip
        pytest.skip(msg)
    with chromium() as driver:
        yield driver
