"""The workbench: one remote-screen round trip, and first page loads on a big lake.

Figures:
- a round trip for the sandbox (the page's POST of an action -> the server runs it in the env, renders the next
  screen -> the JSON with the PNG comes back), p95 over 300 actions through a real `flywheel workbench serve`
  process over HTTP, against the 150 ms budget (a fixed budget, not a measurement);
- its median against the same work done in-process (env step + PNG render + base64: the floor), so the HTTP,
  session and JSON overhead shows as a ratio;
- the first load of each page (home, lead, audit) on a lake of 1,000,000 episodes (BENCH_QUICK=1: 100,000)
  against the 1 s budget: the pages read only what they show, with filters, never a scan of the episodes table.
  BENCH_WORKBENCH_EPISODES sets the lake's size (the 1M lake builds in about 25 s; the whole module takes a minute).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import Figure, console, quick

BUDGET_S, PAGE_BUDGET_S = 0.150, 1.0
PASSWORD = "bench-password-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _actions(n: int, w: int, h: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"kind": "click", "x": int(rng.integers(0, w)), "y": int(rng.integers(0, h))} for _ in range(n)]


def _floor(task, actions: list[dict]) -> list[float]:
    from flywheel.workbench.live import to_action
    from sandbox.env import Env

    env, out = Env(task, screenshots=True), []
    for a in actions:
        if env.done:
            env.reset()
        t0 = time.perf_counter()
        r = env.step(to_action(a))
        base64.b64encode(r.observation.screenshot or env.screenshot()).decode()
        out.append(time.perf_counter() - t0)
    return out


def _login(c, user: str) -> None:
    import re

    tok = re.search(r'name="csrf-token" content="([^"]+)"', c.get("/login").text).group(1)
    r = c.post("/api/login", json={"username": user, "password": PASSWORD}, headers={"X-CSRF-Token": tok})
    r.raise_for_status()
    c.headers["X-CSRF-Token"] = r.json()["csrf"]


def run() -> list[Figure]:
    import httpx

    from flywheel.people.upload import Landing
    from flywheel.workbench.store import Store
    from storage.lake import Lake
    from tests.dashboards.demo_lake import build_demo_lake
    from training.envs import env_backend

    n_eps = int(os.environ.get("BENCH_WORKBENCH_EPISODES") or (100_000 if quick() else 1_000_000))
    n_actions = 100 if quick() else 300
    with tempfile.TemporaryDirectory(prefix="bench-workbench-") as tmp:
        lake = Lake.open(Path(tmp) / "lake", create=True)
        t0 = time.perf_counter()
        build_demo_lake(
            lake, rounds=20, episodes=n_eps, chunks=max(1, min(10, n_eps // 10_000)), quarantined=1_000, seed=1
        )
        console.print(f"demo lake: {n_eps:,} episodes in {time.perf_counter() - t0:.1f} s")
        landing = Path(tmp) / "landing"
        store = Store(Landing.open(str(landing)).store)
        for name, role in (("alice", "annotator"), ("lena", "lead"), ("otto", "auditor")):
            store.add_user(name, PASSWORD, role)
        tasks = env_backend("sandbox").training_tasks(20, 0)
        store.assign("alice", tasks, "lena", mode="think-aloud")
        port = _free_port()
        env = {**os.environ, "FLYWHEEL_CONFIG": str(Path(tmp) / "none.toml")}
        cmd = [sys.executable, "-m", "flywheel", "workbench", "serve", "--lake", str(lake.uri), "--landing",
               str(landing), "--port", str(port), "--insecure-cookies"]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{base}/login", timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("the workbench did not start") from None
                    time.sleep(0.2)
            pages: dict[str, float] = {}
            for user, path in (("alice", "/"), ("lena", "/lead"), ("otto", "/audit")):
                with httpx.Client(base_url=base) as c:
                    _login(c, user)
                    t0 = time.perf_counter()
                    c.get(path).raise_for_status()
                    pages[path] = time.perf_counter() - t0
            with httpx.Client(base_url=base) as c:
                _login(c, "alice")
                aid = store.assignments("alice")[0].assignment_id
                sid = c.post("/api/live", json={"assignment_id": aid}).json()["session_id"]
                info = next(t for t in tasks if t.task_id == store.assignment(aid).task_id)
                actions = _actions(n_actions, info.screen_width or 640, info.screen_height or 400)
                trips = []
                for a in actions:
                    t0 = time.perf_counter()
                    r = c.post(f"/api/live/{sid}/act", json={"input": a})
                    r.raise_for_status()
                    png = r.json()["screenshot"]
                    trips.append(time.perf_counter() - t0)
                    if r.json()["done"]:  # a click on a wrong button ended it: a fresh session, as a person would
                        sid = c.post("/api/live", json={"assignment_id": aid}).json()["session_id"]
                assert png.startswith("data:image/png;base64,")
        finally:
            proc.terminate()
            proc.wait(10)
        floor = _floor(info.payload, actions)
    p95, p50, f50 = float(np.percentile(trips, 95)), float(np.median(trips)), float(np.median(floor))
    figs = [
        Figure(f"remote-screen round trip p95 ({n_actions} clicks, HTTP) vs the 150 ms budget", p95, BUDGET_S, "s",
               target=1.0, lower_is_better=True, note=f"p50 {1000 * p50:.1f} ms; baseline is the budget"),
        Figure("round trip p50 vs in-process env step + render + base64 (the floor)", p50, f50, "s",
               target=0.1, lower_is_better=True,
               note="ratio >= 0.1: HTTP, the session and JSON add at most 9x the work itself"),
    ]  # fmt: skip
    for path, s in pages.items():
        figs.append(Figure(f"first load of {path} on {n_eps:,} episodes vs the 1 s budget", s, PAGE_BUDGET_S, "s",
                           target=1.0, lower_is_better=True))  # fmt: skip
    return figs
