"""Workbench fixtures: an app over a real local lake and landing folder, accounts, and a real server in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PASSWORD = "correct horse battery"
USERS = {"alice": "annotator", "bob": "annotator", "lena": "lead", "otto": "auditor", "ada": "admin", "ivy": "auditor"}


@dataclass
class Bench:
    lake: object
    landing: Path
    app: object
    cfg: object


def make_bench(tmp_path: Path, lake, **cfg_kw) -> Bench:
    from flywheel.workbench.app import WorkbenchConfig, create_app

    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    cfg = WorkbenchConfig(str(lake.uri), str(landing), **cfg_kw)
    app = create_app(cfg)
    for name, role in USERS.items():
        app.state.store.add_user(name, PASSWORD, role, "expert" if role == "annotator" else None)
    return Bench(lake, landing, app, cfg)


@pytest.fixture
def bench(tmp_path: Path, lake) -> Bench:
    return make_bench(tmp_path, lake)


def client(b: Bench, user: str | None = None):
    """A TestClient over https (the session cookie is Secure), logged in as `user`."""
    from fastapi.testclient import TestClient

    c = TestClient(b.app, base_url="https://testserver")
    r = c.get("/login")
    assert r.status_code == 200
    c.headers["X-CSRF-Token"] = csrf_of(r.text)
    if user:
        r = c.post("/api/login", json={"username": user, "password": PASSWORD})
        assert r.status_code == 200, r.text
        c.headers["X-CSRF-Token"] = r.json()["csrf"]
    return c


def csrf_of(html: str) -> str:
    import re

    m = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert m, "the page has no CSRF meta tag"
    return m.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path, lake) -> Iterator[tuple[Bench, str]]:
    """The workbench served by uvicorn on 127.0.0.1 in a thread; stopped at the end of the test."""
    import uvicorn

    b = make_bench(tmp_path, lake)
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(b.app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield b, f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        th.join(10)
