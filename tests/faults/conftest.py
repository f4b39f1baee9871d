"""Fixtures for fault tests: an S3 lake reached through a fault-injecting proxy, rollout files, CLI runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.faultproxy import FaultProxy
from tests.ingest_records.helpers import attempt, write_lines

#: Short bounds, so a dead endpoint is an error in seconds (the defaults are 3 s connect, 20 s read, 3 tries).
FAST_S3 = {"FLYWHEEL_S3_READ_TIMEOUT_S": "2", "FLYWHEEL_S3_CONNECT_TIMEOUT_S": "1", "FLYWHEEL_S3_MAX_ATTEMPTS": "3"}


@pytest.fixture
def proxy(moto_server) -> Iterator[FaultProxy]:
    px = FaultProxy(moto_server.port).start()
    yield px
    px.stop()


@pytest.fixture
def faulty_env(moto_server, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """FLYWHEEL_* settings that reach moto through the proxy (also set in this process)."""
    from core.settings import reset_settings_cache

    env = {**moto_server.env(), "FLYWHEEL_S3_ENDPOINT_URL": proxy.url, **FAST_S3}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    reset_settings_cache()
    return env


@pytest.fixture
def faulty_lake(moto_server, faulty_env: dict[str, str]):
    """A fresh S3 lake whose every request goes through the proxy (no fault injected yet)."""
    from storage import Lake

    bucket = moto_server.new_bucket()  # made directly on moto, not through the proxy
    return Lake.open(f"s3://{bucket}/lake", create=True)


def rollout_file(path: Path, n: int, start: int = 0, n_steps: int = 4, pad: int = 0) -> Path:
    """n distinct rollout attempts (JSONL); `pad` adds that many incompressible characters to each thought."""
    import secrets

    lines = []
    for i in range(start, start + n):
        a = attempt(i, n_steps=n_steps, screen_width=1280, screen_height=800)
        if pad:
            for s in a["steps"]:
                s["thought"] += " " + secrets.token_hex(pad // 2)
        lines.append(a)
    return write_lines(path, lines)


def flywheel(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh process."""
    full = {**os.environ, **(env or {}), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "flywheel", *args], capture_output=True, text=True, env=full, timeout=timeout
    )


def assert_one_line_error(r: subprocess.CompletedProcess) -> str:
    """A clean failure: exit 1, one `error:` line on stderr, no traceback, no terminal escape codes."""
    assert r.returncode == 1, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "\x1b[" not in r.stderr, r.stderr
    return lines[0]


def assert_check_passes(lake) -> None:
    from validators.lake_check import check_lake

    rep = check_lake(lake)
    assert rep.ok, [v.line() for v in rep.violations]
