"""A browser pool shared by the MiniWoB++ tests (starting Chromium costs about 2 s a browser)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.miniwob.browser import chromium_available


def _need_chromium() -> None:
    if not chromium_available():
        pytest.skip("chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)")


@pytest.fixture(scope="session")
def pool() -> Iterator:
    from sandbox.miniwob import BrowserPool

    _need_chromium()
    p = BrowserPool(size=2)
    yield p
    p.close()


@pytest.fixture
def env(pool):
    """Slot 0 of the shared pool as a plain MiniwobEnv."""
    return pool.env(0)


def click(e) -> str:
    return f"click(point='<point>{e.cx} {e.cy}</point>')"


def find(env, role: str, name: str | None = None):
    return next(e for e in env.elements if e.role == role and (name is None or e.name == name))
