"""JSON nested far deeper than any format needs (here 5,000 levels, past Python's recursion limit) is quarantined
as `json_too_deep` by every reader, and the rest of the batch lands: rollout lines, annotation sessions, bundle
manifests and events, and `flywheel upload --check-only`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from flywheel.cli import app
from ingest.annotations import ingest_annotations
from ingest.rollouts import ingest_rollout_file
from ingest.think_aloud import IngestOptions, ingest_paths
from tests.hostile.fuzz_targets import PARTS, annotation_doc, rollout_line, write_parts

DEEP = "[" * 5000 + "]" * 5000


def _codes(lake) -> list[str]:
    return sorted(lake.read("quarantine", ["error_type"]).column("error_type").to_pylist())


def test_depth_ignores_brackets_in_strings() -> None:
    from ingest.safejson import depth

    assert depth(b'{"a": "[[[[{{{{", "b": [[1]]}') == 3
    assert depth(b'"\\"[[["') == 0 and depth(DEEP.encode()) == 5000


def test_rollout_file_keeps_its_good_lines(lake, tmp_path: Path) -> None:
    deep = json.dumps(rollout_line(5)).replace('"token_logprobs": [-0.5, -0.5]', f'"token_logprobs": {DEEP}')
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join([json.dumps(rollout_line(0)), deep, json.dumps(rollout_line(1))]) + "\n")
    r = ingest_rollout_file(lake, p)
    assert lake.count("episodes") == 2 and _codes(lake) == ["json_too_deep"], r


def test_annotation_folder_goes_on_past_a_deep_file(lake, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for i, name in enumerate(["a.json", "c.json"]):
        doc = annotation_doc()
        doc["session_id"] = f"s-{i}"
        (folder / name).write_text(json.dumps(doc))
    (folder / "b.json").write_text('{"format": "flywheel.annotation/1", "episodes": ' + DEEP + "}")
    r = ingest_annotations(lake, [folder])
    assert r.result.episodes_added == 2 and _codes(lake) == ["json_too_deep"]


def _bundles(tmp_path: Path) -> tuple[Path, list[Path]]:
    root = tmp_path / "bundles"
    good = json.loads(json.dumps(PARTS["manifest"]))
    out = [write_parts(root / "good", {**PARTS, "manifest": good})]
    deep_manifest = {**good, "session_id": "deep-m"}
    out.append(write_parts(root / "deep-manifest", {**PARTS, "manifest": deep_manifest},
                           {"manifest.json": json.dumps(deep_manifest).replace('"group"', f'"x": {DEEP}, "group"').encode()}))  # fmt: skip
    events = "".join(json.dumps(e) + "\n" for e in PARTS["events"]) + '{"t": 4.0, "type": "wheel", "x": ' + DEEP + "}\n"
    out.append(write_parts(root / "deep-events", {**PARTS, "manifest": {**good, "session_id": "deep-e"}},
                           {"events.jsonl": events.encode()}))  # fmt: skip
    return root, out


def test_bundles_quarantined_and_the_good_one_lands(lake, tmp_path: Path) -> None:
    _, paths = _bundles(tmp_path)
    r = ingest_paths(lake, paths, round=0, opts=IngestOptions(salt="t"))
    assert lake.count("episodes") == 1 and _codes(lake) == ["json_too_deep", "json_too_deep"], r


def test_upload_check_only_reports_every_bundle(tmp_path: Path) -> None:
    _, paths = _bundles(tmp_path)
    res = CliRunner().invoke(app, ["upload", *map(str, paths), "--check-only"])
    assert "RecursionError" not in res.output and "Traceback" not in res.output
    rows = [ln for ln in res.output.splitlines() if "refused" in ln or "checked ok" in ln]
    assert len(rows) == 3 and "checked ok" in rows[0], res.output  # the good bundle is checked, the batch goes on
    assert all("json_too_deep" in r for r in rows[1:]), res.output
