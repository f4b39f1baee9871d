"""`flywheel dashboard`: writes the page, refuses bad arguments in one line, and `--serve` serves a page that
follows the lake."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flywheel.cli import app
from storage.lake import Lake


def test_cli_writes_the_page(demo_lake, tmp_path: Path) -> None:
    lake, totals = demo_lake
    out = tmp_path / "site" / "dash.html"
    res = CliRunner().invoke(app, ["dashboard", "--lake", str(tmp_path / "lake"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "error" not in res.output
    html = out.read_text()
    assert html.count('data-state="ok"') == html.count('<section class="panel')
    assert f'<div class="v">{totals.episodes:,}</div>' in html


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "70000"], "--port must be between 0 and 65535"),
        (["--out", "{tmp}"], "is a folder"),
        (["--lake", "{tmp}/not-a-lake"], "is not a flywheel lake"),
    ],
)
def test_cli_bad_arguments_fail_in_one_line(lake, tmp_path: Path, args: list[str], message: str) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--lake" not in args:
        args += ["--lake", str(tmp_path / "lake")]
    proc = subprocess.run(
        [sys.executable, "-m", "flywheel", "dashboard", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


@pytest.mark.slow
def test_serve_follows_the_lake(demo_lake, tmp_path: Path) -> None:
    lake, totals = demo_lake
    out = tmp_path / "served.html"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flywheel",
            "dashboard",
            "--serve",
            "--port",
            "0",
            "--lake",
            str(tmp_path / "lake"),
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        url, deadline = None, time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            m = re.search(r"serving (http://127\.0\.0\.1:\d+/)", line)
            url = m.group(1) if m else None
        assert url, "the server did not report its address"
        status, html = _get(url)
        assert status == 200 and 'data-panel="pass_rate"' in html
        assert '<div class="v">6</div><div class="l">latest round</div>' in html

        Lake.open(tmp_path / "lake").upsert("rounds", [{"round": 7, "updated_at": datetime.now(UTC)}])
        status, html = _get(url)
        assert status == 200 and '<div class="v">7</div><div class="l">latest round</div>' in html
        assert _get(url + "../../etc/passwd")[0] == 404
        assert _get(url + "served.html")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
