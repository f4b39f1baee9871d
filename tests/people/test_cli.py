"""Every people command: --help with an example; bad arguments exit non-zero with one error line and no
traceback; a full session of commands writes nothing outside the lake, the landing area and its output paths."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flywheel.cli import app

COMMANDS = [
    ["upload"], ["sessions"], ["audit", "sample"], ["audit", "record"], ["audit", "report"],
    ["export", "sft-trl"], ["export", "sft-verl"], ["export", "ct-text"], ["export", "preferences"],
]  # fmt: skip


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_help_has_an_example(cmd: list[str]) -> None:
    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "300"})
    assert r.exit_code == 0
    example = [line for line in r.output.splitlines() if "Example: flywheel " + " ".join(cmd) in line]
    assert example, r.output


def _main(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    from flywheel.cli import run

    monkeypatch.setenv("COLUMNS", "300")
    code = run(args)
    out = capsys.readouterr()
    return code, out.err + out.out


BAD = [
    (["upload", "no/such/bundle.zip"], "no such file or folder"),
    (["upload", "{bundle}", "--landing", "ftp://host/x"], "unknown lake URI scheme"),
    (["sessions", "--status", "lost"], "unknown --status"),
    (["audit", "sample"], "round"),
    (["audit", "sample", "--round", "1", "--n", "0"], "greater than or equal to 1"),
    (["audit", "sample", "--round", "9"], "no episodes of round 9"),
    (["audit", "sample", "--round", "1", "--stratify", "colour"], "cannot stratify by colour"),
    (["audit", "record", "nothing.csv"], "no such file"),
    (["audit", "report", "--method", "wald"], "unknown --method"),
    (["audit", "report", "--round", "4"], "no audited episodes in round 4"),
    (["export", "sft-trl"], "out"),
    (["export", "sft-verl", "--out", "{tmp}/x", "--version", "999"], "version"),
    (["export", "ct-text", "--out", "{tmp}/y", "--lake", "{tmp}/not-a-lake"], "not a flywheel lake"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a[:3]) for a, _ in BAD])
def test_bad_arguments_give_one_error_line(args, needle, lake, tmp_path, capsys, monkeypatch) -> None:
    from tests.people.helpers import populate

    populate(lake, rounds=(1,), per_source=3, audits=False)
    (tmp_path / "b.zip").write_bytes(b"")
    monkeypatch.setenv("FLYWHEEL_LAKE", str(lake.uri))
    from core.settings import reset_settings_cache

    reset_settings_cache()
    args = [a.format(tmp=tmp_path, bundle=tmp_path / "b.zip") for a in args]
    monkeypatch.chdir(tmp_path)
    code, text = _main(args, capsys, monkeypatch)
    assert code != 0
    errors = [line for line in text.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, text
    assert needle.lower() in errors[0].lower(), text
    assert "Traceback" not in text


SESSION = textwrap.dedent(
    """
    import sys
    from flywheel.cli import run as cli_run
    out = sys.argv[1]
    def run(*args):
        code = cli_run(list(args))
        assert not code, (args, code)
    lake = ["--lake", out + "/lake"]
    run("init", *lake)
    run("upload", out + "/in/b1.zip", out + "/in/b2", "--landing", out + "/landing", "--ingest", *lake)
    run("sessions", "--landing", out + "/landing", *lake)
    run("audit", "sample", "--round", "0", "--n", "2", "--out", out + "/audit", *lake)
    import csv
    rows = list(csv.DictReader(open(out + "/audit/verdicts.csv")))
    with open(out + "/audit/verdicts.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({**r, "verdict": "good", "auditor": "me"})
    run("audit", "record", out + "/audit/verdicts.csv", *lake)
    run("audit", "report", "--format", "csv", "--out", out + "/report.csv", *lake)
    for kind in ("sft-trl", "sft-verl", "ct-text", "preferences"):  # this session's CT pile and preferences are empty
        run("export", kind, "--out", out + "/exports/" + kind, "--allow-empty", *lake)
    print("SESSION OK")
    """
)


@pytest.mark.slow
def test_commands_write_nothing_outside_their_paths(tmp_path: Path) -> None:
    """Run a whole session in a fresh process with empty cwd, HOME and TMPDIR; only the named paths appear."""
    from tests.people.test_upload import _bundle

    out, cwd, home, tmp = (tmp_path / n for n in ("out", "cwd", "home", "tmp"))
    for d in (out, cwd, home, tmp):
        d.mkdir()
    _bundle(out / "in" / "b1", "cli-1", "zip")
    _bundle(out / "in" / "b2", "cli-2")
    # route the landed episodes so the audit and exports have piles (routing is not a people command)
    script = SESSION.replace(
        'run("sessions"',
        "from storage import Lake\n"
        "from validators.registry import parse_policy\n"
        "from validators.routing import route_round\n"
        'route_round(Lake.open(out + "/lake"), 0, policy=parse_policy({"sources": {"default": ["schema"]}}), run_dq=False)\n'
        'run("sessions"',
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYWHEEL_", "XDG_", "HF_HOME", "PREFECT_HOME"))}
    env.update(
        HOME=str(home), TMPDIR=str(tmp), COLUMNS="200", HF_HUB_OFFLINE="1", FLYWHEEL_CONFIG=str(tmp_path / "none.toml")
    )
    r = subprocess.run(
        [sys.executable, "-c", script, str(out)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and "SESSION OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert list(cwd.iterdir()) == []
    assert list(home.rglob("*")) == [], list(home.rglob("*"))
    assert list(tmp.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["audit", "exports", "in", "lake", "landing", "report.csv"]
    assert sorted(p.name for p in (out / "audit").iterdir()) == ["sample.json", "sheet.html", "verdicts.csv"]
