"""A real Prefect server on 127.0.0.1 (subprocess) and helpers to run `flywheel` commands against it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.helpers.s3 import free_port

REPO = Path(__file__).resolve().parents[2]
FLYWHEEL = str(Path(sys.executable).with_name("flywheel"))


@dataclass
class PrefectServer:
    """`prefect server start` on 127.0.0.1 with its own PREFECT_HOME (which holds its SQLite database), in its own
    process group. `kill` then `start` restarts it on the same port with the same database."""

    home: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self, timeout: float = 120) -> None:
        env = {
            **os.environ,
            "PREFECT_HOME": str(self.home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
        }
        env.pop("PREFECT_API_URL", None)
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "server.log", "a") as log:
            self.proc = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "server", "start", "--host", "127.0.0.1",
                                          "--port", str(self.port)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.home,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited: {(self.home / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"prefect server did not start within {timeout:.0f} s")

    def kill(self) -> None:
        """kill -9 the server's whole process group: the API vanishes mid-request, nothing is shut down cleanly."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    """`prefect server start` on a free port, shared by the session's round tests; yields its API URL."""
    server = PrefectServer(Path(tempfile.mkdtemp(prefix="prefect-server-")))
    server.start()
    yield server.url
    server.stop()
    shutil.rmtree(server.home, ignore_errors=True)


@pytest.fixture
def flywheel_env(prefect_server: str, tmp_path: Path) -> dict[str, str]:
    """Environment for `flywheel` subprocesses: the shared Prefect server, offline, this test's config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    env.update(PREFECT_API_URL=prefect_server, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", GX_ANALYTICS_ENABLED="false",
               FLYWHEEL_CONFIG=str(tmp_path / "none.toml"), PYTHONPATH=str(REPO))  # fmt: skip
    return env
