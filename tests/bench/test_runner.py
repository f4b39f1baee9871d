"""`python -m bench` runs each module in a process of its own and still reports its figures and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import isolated
from bench.common import SHARED_ENV, shared_folder

ROOT = Path(__file__).resolve().parents[2]


def test_each_module_runs_in_its_own_process_and_its_figures_come_back(tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_QUICK": "1", "BENCH_RESULTS": str(tmp_path / "r.json"),
           "BENCH_SUMMARY": str(tmp_path / "s.txt"), "PYTHONPATH": str(ROOT)}  # fmt: skip
    env.pop(SHARED_ENV, None)
    out = subprocess.run([sys.executable, "-m", "bench", "sandbox", "keyindex"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    res = json.loads((tmp_path / "r.json").read_text())
    assert set(res["modules"]) == {"bench_sandbox", "bench_keyindex"}
    assert {f["module"] for f in res["figures"]} == {"bench_sandbox", "bench_keyindex"}
    assert all(isinstance(f["ratio"], float) and f["unit"] for f in res["figures"])
    lines = (tmp_path / "s.txt").read_text().splitlines()
    assert len(lines) == len(res["figures"]) + 1 and lines[-1].startswith("all targets met")


def test_a_module_that_fails_in_its_process_is_an_error_with_its_reason() -> None:
    with pytest.raises(RuntimeError, match="ModuleNotFoundError: No module named 'bench.bench_nope'"):
        isolated("bench_nope")


def test_the_shared_folder_is_the_runs_and_absent_outside_a_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SHARED_ENV, raising=False)
    assert shared_folder("cold-start") is None
    monkeypatch.setenv(SHARED_ENV, str(tmp_path))
    assert shared_folder("cold-start") == str(tmp_path / "cold-start") and (tmp_path / "cold-start").is_dir()
