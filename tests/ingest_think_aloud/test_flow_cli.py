"""The Prefect flow on a landing folder (real Prefect test server) and the CLI command."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from flywheel.cli import app


def test_flow_lands_sessions_and_quarantine_idempotently(
    prefect_harness, lake, text_bundle_dir: Path, tmp_path: Path
) -> None:
    from flows.ingest_think_aloud import ingest_think_aloud

    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copytree(text_bundle_dir, landing / "good")
    (landing / "junk.zip").write_bytes(b"PK\x03\x04 not really a zip")
    lake_uri = str(lake.uri)
    first = ingest_think_aloud(str(landing), lake_uri, round=4)
    assert (first["episodes_added"], first["sessions_added"], first["quarantined_added"]) == (1, 1, 1)
    q = lake.read("quarantine").to_pylist()[0]
    assert q["error_type"] == "archive_corrupt" and q["round"] == 4
    second = ingest_think_aloud(str(landing), lake_uri, round=4)
    assert (second["episodes_added"], second["sessions_added"], second["quarantined_added"]) == (0, 0, 0)
    assert lake.count("episodes") == 1 and lake.count("quarantine") == 1


def test_cli_ingests_and_reports(lake, text_bundle_dir: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app, ["ingest", "think-aloud", str(text_bundle_dir), "--lake", str(lake.uri), "--round", "1"]
    )
    assert r.exit_code == 0, r.output
    assert "1 episode(s) and 1 session(s) landed" in r.output
    ep = lake.read("episodes").to_pylist()[0]
    assert ep["round"] == 1 and ep["n_steps"] == 7 and ep["steps"][0]["thought"].startswith("First I open")
    r = CliRunner().invoke(app, ["ingest", "think-aloud", str(tmp_path / "nope"), "--lake", str(lake.uri)])
    assert r.exit_code != 0
