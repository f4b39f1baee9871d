"""Shared fixtures: a local lake, a moto S3 server over real HTTP, an S3 lake, and the Prefect test harness."""

from __future__ import annotations

import os
import tempfile

# Offline and quiet, before anything imports Prefect, GX or transformers.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# No torch.compile in the tests' training jobs (the CLI rounds they start included): each process would pay a
# compile (10-90 s) for a few steps. tests/training/test_compiled.py turns it on for its own tests.
os.environ.setdefault("FLYWHEEL_COMPILE", "0")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="flywheel-prefect-"))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.s3 import MotoServer, start_moto

SHARED = Path(__file__).resolve().parents[2] / "shared"
EXTERNAL = SHARED / "external"


@pytest.fixture(scope="session")
def external() -> Path:
    """Real external data (read-only): ../shared/external."""
    if not EXTERNAL.is_dir():
        pytest.skip(f"{EXTERNAL} is not there")
    return EXTERNAL


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test sees default settings, not the developer's flywheel.toml or FLYWHEEL_* variables."""
    from core.settings import reset_settings_cache

    for k in list(os.environ):
        if k.startswith("FLYWHEEL_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(tmp_path / "no-flywheel.toml"))
    reset_settings_cache()
    yield
    reset_settings_cache()


@pytest.fixture
def lake(tmp_path: Path):
    """A fresh local lake."""
    from storage import Lake

    return Lake.open(tmp_path / "lake", create=True)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A moto S3 server as a subprocess on 127.0.0.1 (real HTTP), one per test process."""
    srv = start_moto()
    yield srv
    srv.stop()


@pytest.fixture
def s3_lake(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """A fresh lake on the moto server, in its own bucket."""
    from core.settings import reset_settings_cache
    from storage import Lake

    for k, v in moto_server.env().items():
        monkeypatch.setenv(k, v)
    reset_settings_cache()
    bucket = moto_server.new_bucket()
    return Lake.open(f"s3://{bucket}/lake", create=True)


@pytest.fixture(params=["local", "s3"])
def any_lake(request: pytest.FixtureRequest):
    """The same test against a local lake and an S3 lake."""
    return request.getfixturevalue("lake" if request.param == "local" else "s3_lake")


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """Prefect's test harness (a temporary server), started once per test process (about 12 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
