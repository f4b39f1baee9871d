"""The Prefect flows and the CLI commands, end to end on the example files and a real lake."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from ingest.formats.rollouts import ROLLOUT
from tests.ingest_records.helpers import attempt, write_lines

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"


def test_rollout_examples_validate_against_the_json_schema() -> None:
    schema = json.loads((ROOT / "schemas" / "rollout.schema.json").read_text())
    v = jsonschema.Draft202012Validator(schema)
    lines = (EX / "rollouts" / "rollouts.jsonl").read_text().splitlines()
    assert len(lines) == 3
    for ln in lines:
        v.validate(json.loads(ln))
    # every property of the JSON Schema is a column of the Arrow form, and the other way round
    assert set(schema["properties"]) - {"format"} == set(ROLLOUT.names)
    assert set(schema["$defs"]["step"]["properties"]) == set(ROLLOUT.field("steps").type.value_type.names)


def test_flows_ingest_both_sources(prefect_harness, lake, tmp_path: Path) -> None:
    from flows.ingest_records import ingest_annotations, ingest_rollouts

    bad = write_lines(tmp_path / "r.jsonl", [attempt(0), "not json", attempt(1)])
    r = ingest_rollouts([str(EX / "rollouts" / "rollouts.jsonl"), str(bad)], lake=str(lake.uri))
    assert (r["episodes_added"], r["quarantined_added"], r["files"]) == (5, 1, 2)
    a = ingest_annotations([str(EX / "annotations")], lake=str(lake.uri))
    assert (a["episodes_added"], a["pairs_added"]) == (1, 2)
    again = ingest_rollouts([str(bad)], lake=str(lake.uri))
    assert again["episodes_added"] == 0 and lake.count("episodes") == 6 and lake.count("quarantine") == 1


def test_cli_commands(tmp_path: Path) -> None:
    from flywheel.cli import app

    runner = CliRunner()
    lake = str(tmp_path / "lake")
    res = runner.invoke(app, ["ingest", "rollouts", str(EX / "rollouts" / "rollouts.jsonl"), "--lake", lake])
    assert res.exit_code == 0, res.output
    assert "3 new" in res.output
    res = runner.invoke(app, ["ingest", "annotations", str(EX / "annotations"), "--lake", lake])
    assert res.exit_code == 0 and "override rate 25%" in res.output and "2 preference pair(s)" in res.output
    res = runner.invoke(app, ["ingest", "rollouts", "--help"])
    assert "Example:" in res.output
