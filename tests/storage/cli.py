"""Run the real `flywheel` command in a subprocess, as a user would (errors, exit codes, stdin, env)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str
    seconds: float


def flywheel(*args: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 120) -> Run:
    """`python -m flywheel ARGS` with the current environment (the tests' FLYWHEEL_* settings) plus `env`."""
    full = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    t = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "flywheel", *args],
        cwd=ROOT,
        env=full,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(p.returncode, p.stdout, p.stderr, time.monotonic() - t)


def main_inprocess(*args: str, env: dict[str, str] | None = None) -> Run:
    """The real entry point's `flywheel.cli.run` with its one-line error handling, run in this process (no
    interpreter start-up: about 0.1 s instead of 1-3 s). Environment and settings are restored afterwards."""
    import contextlib
    import io

    from core.settings import reset_settings_cache
    from flywheel.cli import run

    saved_env = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    os.environ.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    reset_settings_cache()
    t = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        reset_settings_cache()
    return Run(code, out.getvalue(), err.getvalue(), time.monotonic() - t)


def assert_one_line_error(r: Run, *needles: str) -> None:
    """Exit 1, nothing but `error: ...` on one line of stderr, no traceback, and the message says what it must."""
    assert r.code == 1, (r.code, r.out, r.err)
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.err
    assert "Traceback" not in r.err + r.out
    for n in needles:
        assert n in lines[0], (n, lines[0])
