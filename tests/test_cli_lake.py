"""The lake commands as a user runs them: init, tables, sql (every output format), shell, config, --help."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flywheel.cli import app
from schemas.tables import TABLES
from storage import Lake
from tests.storage.cli import flywheel
from tests.storage.data import episodes

runner = CliRunner()


@pytest.mark.parametrize("command", ["init", "tables", "sql", "shell", "config"])
def test_help_has_an_example(command: str) -> None:
    r = runner.invoke(app, [command, "--help"])
    assert r.exit_code == 0, r.output
    assert "Example:" in r.output
    if command not in ("config",):
        assert "--lake" in r.output


def test_init_then_tables(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    r = runner.invoke(app, ["init", "--lake", str(root)])
    assert r.exit_code == 0, r.output
    Lake.open(root).append("episodes", episodes(7))
    r = runner.invoke(app, ["init", "--lake", str(root)])  # again: harmless
    assert r.exit_code == 0
    r = runner.invoke(app, ["tables", "--lake", str(root)])
    assert r.exit_code == 0, r.output
    rows = {ln.split("│")[1].strip(): ln for ln in r.output.splitlines() if ln.count("│") >= 5}
    assert set(TABLES) <= set(rows)
    cells = [c.strip() for c in rows["episodes"].split("│")]
    assert cells[2:4] == ["7", "1"]  # 7 rows, Delta version 1


def test_sql_writes_csv_json_parquet(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    Lake.open(root, create=True).append("episodes", episodes(9))
    q = "SELECT task_id, round, env_passed, steps FROM episodes ORDER BY task_id"
    for fmt in ("csv", "json", "parquet"):
        out = tmp_path / f"out.{fmt}"
        r = runner.invoke(app, ["sql", q, "--lake", str(root), "--format", fmt, "--out", str(out)])
        assert r.exit_code == 0, r.output
        assert "wrote 9 rows" in r.output
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert [r["task_id"] for r in rows] == sorted(f"task-{i}" for i in range(9))
    assert json.loads(rows[0]["steps"])[0]["action"].startswith("click(")  # nested cells as JSON text
    lines = [json.loads(ln) for ln in (tmp_path / "out.json").read_text().splitlines()]
    assert len(lines) == 9 and lines[0]["steps"][1]["text"] == "it's done"
    t = pq.read_table(tmp_path / "out.parquet")
    assert t.num_rows == 9 and t.schema.field("steps").type.value_type.num_fields > 10
    # table output on the terminal
    r = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM episodes", "--lake", str(root)])
    assert r.exit_code == 0 and "9" in r.output
    r = runner.invoke(app, ["sql", q, "--lake", str(root), "--format", "parquet"])
    assert r.exit_code != 0  # parquet needs --out


def test_shell_reads_statements_from_stdin(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    Lake.open(root, create=True).append("episodes", episodes(3))
    script = "SELECT 1 AS one;\n.tables\nSELECT count(*)\n  AS n_episodes FROM episodes;\nSELECT nonsense FROM nowhere;\nSELECT 42 AS last\n"
    r = flywheel("shell", "--lake", str(root), input=script)
    assert r.code == 0, r.err
    assert "one" in r.out and "n_episodes" in r.out and "preference_pairs" in r.out
    table_cells = [ln.split("│")[1].strip() for ln in r.out.splitlines() if ln.startswith("│")]
    assert table_cells == ["1", "3", "42"]  # the last statement ran without its semicolon at end of input
    assert "error:" in r.out and "nowhere" in r.out  # a bad statement is reported and the session goes on
    assert "Traceback" not in r.out + r.err


def test_config_masks_secrets(tmp_path: Path) -> None:
    toml = tmp_path / "flywheel.toml"
    toml.write_text('lake = "s3://from-toml/lake"\ns3_secret_access_key = "toml-secret-VALUE-123"\n')
    env = {
        "FLYWHEEL_CONFIG": str(toml),
        "FLYWHEEL_S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "FLYWHEEL_S3_ACCESS_KEY_ID": "AKIA-ENV-KEY-ID-456",
        "FLYWHEEL_PSEUDONYM_SALT": "salt-ENV-789",
    }
    r = flywheel("config", env=env)
    assert r.code == 0, r.err
    for secret in ("toml-secret-VALUE-123", "AKIA-ENV-KEY-ID-456", "salt-ENV-789"):
        assert secret not in r.out + r.err
    assert "s3://from-toml/lake" in r.out and "http://127.0.0.1:9" in r.out  # both sources were read
    assert r.out.count("***") >= 3
    # the environment wins over the file
    r = flywheel("config", env={**env, "FLYWHEEL_LAKE": "/data/env-lake"})
    assert "/data/env-lake" in r.out and "from-toml" not in r.out
