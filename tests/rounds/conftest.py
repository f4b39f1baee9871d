"""A real Prefect server on 127.0.0.1 (subprocess) and helpers to run `flywheel` commands against it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.s3 import free_port

REPO = Path(__file__).resolve().parents[2]
FLYWHEEL = str(Path(sys.executable).with_name("flywheel"))


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    """`prefect server start` on a free port; yields its API URL."""
    port = free_port()
    home = tempfile.mkdtemp(prefix="prefect-server-")
    env = {**os.environ, "PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    log = open(Path(home) / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "server", "start", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=home)  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited: {(Path(home) / 'server.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("prefect server did not start within 120 s")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def flywheel_env(prefect_server: str, tmp_path: Path) -> dict[str, str]:
    """Environment for `flywheel` subprocesses: the shared Prefect server, offline, this test's config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    env.update(PREFECT_API_URL=prefect_server, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", GX_ANALYTICS_ENABLED="false",
               FLYWHEEL_CONFIG=str(tmp_path / "none.toml"), PYTHONPATH=str(REPO))  # fmt: skip
    return env
