"""Interactive-annotation sessions into a real lake: steps with proposals and decisions, override rate,
preference pairs, each malformed case, idempotency."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from ingest.annotations import ingest_annotations, read_session
from ingest.formats.annotations import SCHEMA_PATH, write_annotation_session
from schemas.records import Episode

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "annotations" / "session-001.json"


def _doc() -> dict:
    return json.loads(EXAMPLE.read_text())


def _write(tmp_path: Path, doc: dict, name: str = "s.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_example_validates_against_the_json_schema() -> None:
    jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).validate(_doc())


def test_session_lands_with_proposals_decisions_and_override_rate(lake) -> None:
    r = ingest_annotations(lake, [EXAMPLE.parent], round=2)
    assert (r.files, r.result.episodes_added, r.pairs_added, r.result.quarantined_added) == (1, 1, 2, 0)
    ep = lake.read("episodes").to_pylist()[0]
    assert ep["source"] == "interactive" and ep["round"] == 2 and ep["policy_version"] == "ckpt-r3"
    assert ep["annotator"].startswith("anon-") and "alice@example.org" not in json.dumps(ep, default=str)
    s0, s1 = ep["steps"][0], ep["steps"][1]
    assert (s0["decision"], s0["accepted_index"], s0["action_type"]) == ("accepted", 0, "right_single")
    assert s0["thought"] == s0["proposals"][0]["thought"] and s0["decided_by"] == ep["annotator"]
    # the override ran: executed thought/action are the annotator's, both proposals are kept
    assert s1["decision"] == "overridden" and s1["accepted_index"] is None
    assert s1["action"] == "click(point='<point>260 184</point>')" and s1["thought"].startswith("The menu has Rename")
    assert [p["action"] for p in s1["proposals"]] == [
        "click(point='<point>260 210</point>')",
        "click(point='<point>260 236</point>')",
    ]
    assert s1["proposals"][0]["model_version"] == "ckpt-r3" and s1["proposals"][0]["score"] == -1.7
    assert ep["final_answer"] == "renamed" and ep["outcome"] == "finished"
    assert Episode.from_row(ep).content_hash() == ep["episode_id"]
    sess = lake.read("sessions").to_pylist()[0]
    assert sess["session_id"] == "ia-2025-06-01-0001" and sess["override_rate"] == pytest.approx(0.25)
    assert (sess["n_episodes"], sess["n_actions"], sess["duration_s"], sess["status"]) == (1, 4, 9.0, "landed")


def test_overrides_become_preference_pairs_queryable_in_the_lake(lake) -> None:
    ingest_annotations(lake, [EXAMPLE])
    rows = (
        lake.duckdb()
        .execute("SELECT step_index, prompt, chosen, rejected, model_version FROM preference_pairs ORDER BY rejected")
        .fetchall()
    )
    assert len(rows) == 2
    for step_index, prompt, chosen, _rejected, mv in rows:
        assert step_index == 1 and mv == "ckpt-r3"
        assert prompt.startswith("Instruction: Rename the note") and "Rename (260,184)" in prompt  # the observation
        assert "right_single(point='<point>212 148</point>')" in prompt  # the executed history
        assert chosen == (
            "Thought: The menu has Rename at the top; deleting would lose the note.\n"
            "Action: click(point='<point>260 184</point>')"
        )
    assert rows[0][3].startswith("Thought: Choose Duplicate") and rows[1][3].startswith("Thought: Delete the note")


def test_reingesting_adds_nothing(lake) -> None:
    ingest_annotations(lake, [EXAMPLE])
    versions = {t: lake.version(t) for t in ("episodes", "sessions", "preference_pairs")}
    r = ingest_annotations(lake, [EXAMPLE])
    assert (r.result.episodes_added, r.result.sessions_added, r.pairs_added) == (0, 0, 0)
    assert {t: lake.version(t) for t in versions} == versions


def _bad_episode(case: str) -> dict:
    doc = _doc()
    ep = doc["episodes"][0]
    if case == "accepted_index_out_of_range":
        ep["steps"][0]["accepted_index"] = 3
    elif case == "override_without_thought":
        del ep["steps"][1]["override"]["thought"]
    elif case == "override_empty_thought":
        ep["steps"][1]["override"]["thought"] = "  "
    elif case == "unknown_action_kind":
        ep["steps"][1]["override"]["action"] = "teleport(point='<point>1 2</point>')"
    elif case == "bad_action":
        ep["steps"][1]["override"]["action"] = "click(point='<point>1 2')"
    elif case == "missing_field":
        del ep["steps"][2]["decision"]
    elif case == "wrong_type":
        ep["difficulty"] = "hard"
    elif case == "nan_time":
        ep["steps"][0]["t_start"] = float("nan")
    elif case == "infinite_score":
        ep["steps"][0]["proposals"][0]["score"] = float("inf")
    elif case == "huge_number":  # 1e999 parses as infinity
        ep["steps"][1]["t_end"] = float("-inf")
    elif case == "accepted_without_index":
        del ep["steps"][0]["accepted_index"]
    return doc


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("accepted_index_out_of_range", "accepted_index_out_of_range"),
        ("override_without_thought", "override_without_thought"),
        ("override_empty_thought", "override_without_thought"),
        ("unknown_action_kind", "unknown_action_kind"),
        ("bad_action", "bad_action"),
        ("missing_field", "missing_field"),
        ("wrong_type", "wrong_type"),
        ("accepted_without_index", "missing_field"),
        ("nan_time", "non_finite_number"),
        ("infinite_score", "non_finite_number"),
        ("huge_number", "non_finite_number"),
    ],
)
def test_a_bad_episode_is_quarantined_and_the_rest_of_the_session_lands(
    lake, tmp_path: Path, case: str, code: str
) -> None:
    doc = _bad_episode(case)
    doc["episodes"].append(copy.deepcopy(_doc()["episodes"][0]))  # a good second episode
    r = ingest_annotations(lake, [_write(tmp_path, doc)])
    q = lake.read("quarantine").to_pylist()
    assert [(x["locator"], x["error_type"]) for x in q] == [("episodes/0", code)]
    assert r.result.episodes_added == 1 and lake.read("episodes").to_pylist()[0]["attempt"] == 1
    sess = lake.read("sessions").to_pylist()[0]
    assert sess["status"] == "landed" and sess["problems"] == [f"{code} at episodes/0"] and sess["n_episodes"] == 1


def test_a_file_that_is_not_a_session_is_quarantined_whole(lake, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "flywheel.annotation/1", "session_id": ')
    no_annotator = _doc()
    del no_annotator["annotator"]
    r = ingest_annotations(lake, [broken, _write(tmp_path, no_annotator, "n.json")])
    codes = sorted(x["error_type"] for x in lake.read("quarantine").to_pylist())
    assert codes == ["invalid_json", "missing_field"] and r.result.episodes_added == 0
    assert sorted(s["status"] for s in lake.read("sessions").to_pylist()) == ["quarantined", "quarantined"]


def test_pii_in_an_override_thought_is_redacted(tmp_path: Path) -> None:
    doc = _doc()
    doc["episodes"][0]["steps"][1]["override"]["thought"] = "Mail bob@example.com the note instead."
    s = read_session(_write(tmp_path, doc))
    step = s.episodes[0].steps[1]
    assert "bob@example.com" not in step.thought and step.thought_flag == "pii_redacted"


def test_writer_round_trips_and_refuses_bad_sessions(tmp_path: Path) -> None:
    doc = _doc()
    p = write_annotation_session(tmp_path / "w.json", doc)
    assert json.loads(p.read_text()) == doc
    with pytest.raises(ValueError, match="accepted_index_out_of_range"):
        write_annotation_session(tmp_path / "x.json", _bad_episode("accepted_index_out_of_range"))
    with pytest.raises(ValueError, match="override_without_thought"):
        write_annotation_session(tmp_path / "x.json", _bad_episode("override_without_thought"))
    assert not (tmp_path / "x.json").exists()
