"""Attempts written in the three ingestion formats and read back by the real readers into a real lake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.demonstrators import Expert, Interactive, Novice
from sandbox.export import action_events, write_annotations, write_rollout_file, write_think_aloud
from sandbox.rollout import run_attempt, to_episode
from sandbox.tasks import make_task

TASKS = [
    make_task("fill_form", 2, 1),
    make_task("answer", 3, 3),
    make_task("popup", 3, 2),
    make_task("menu_path", 2, 4),
]


def test_rollout_file_lands_every_attempt(lake, tmp_path: Path) -> None:
    from ingest.rollouts import ingest_rollout_file

    attempts = [run_attempt(t, Novice(), k) for t in TASKS for k in range(3)]
    assert write_rollout_file(attempts, tmp_path / "r.jsonl", "sandbox-novice") == 12
    res = ingest_rollout_file(lake, tmp_path / "r.jsonl")
    assert res.result.episodes_added == 12 and res.result.quarantined_added == 0
    rows = lake.read("episodes").to_pylist()
    by = {(r["task_id"], r["attempt"]): r for r in rows}
    for a in attempts:
        r = by[(a.task.task_id, a.attempt)]
        assert r["env_passed"] == a.passed and r["n_steps"] == len(a.steps)
        assert [s["action"] for s in r["steps"]] == [s.action for s in a.steps]
        assert [s["observation"] for s in r["steps"]] == [s.observation for s in a.steps]


def test_annotation_session_reads_back_with_proposals_and_decisions(tmp_path: Path) -> None:
    from ingest.annotations import read_session

    attempts = [run_attempt(t, Interactive(), 0) for t in TASKS]
    path = write_annotations(attempts, tmp_path / "s.json")
    got = read_session(path)
    assert len(got.episodes) == len(TASKS) and not got.quarantined
    for ep, a in zip(got.episodes, attempts):
        assert [s.action for s in ep.steps] == [s.action for s in a.steps]
        assert [s.decision for s in ep.steps] == [s.decision for s in a.steps]
        assert all(s.proposals for s in ep.steps)
    with pytest.raises(ValueError, match="Interactive"):
        write_annotations([run_attempt(TASKS[0], Expert(), 0)], tmp_path / "bad.json")


def test_think_aloud_bundle_text_only_reduces_back_to_the_same_actions(tmp_path: Path) -> None:
    from ingest.events import reduce_events
    from ingest.formats.bundle import BundleManifest

    a = run_attempt(TASKS[0], Novice(), 0, screenshots=True)
    b = write_think_aloud(a, tmp_path, speech=False)
    m = BundleManifest.from_json(json.loads((b / "manifest.json").read_text()))
    assert m.group == "novice" and m.meta["sandbox_task"]["task_id"] == a.task.task_id
    assert len(m.screenshots) == len(a.steps) and (b / "transcript.jsonl").is_file()
    # the element names of the text screens prime ASR on ingest
    listed = {ln.split('"')[1] for s in a.steps for ln in (s.observation or "").splitlines() if ln.count('"') >= 2}
    assert m.elements and set(m.elements) <= listed
    events = [json.loads(ln) for ln in (b / "events.jsonl").read_text().splitlines()]
    got = [x.action for x in reduce_events(events)]
    from schemas.actions import parse_action

    want = [parse_action(s.action) for s in a.steps if action_events(s.action)]
    assert got == want


def test_think_aloud_bundle_with_speech_ingests(lake, tmp_path: Path) -> None:
    from ingest.formats.bundle import espeak_available
    from ingest.think_aloud import process_input

    if not espeak_available():
        pytest.skip("espeak-ng is not installed")
    a = run_attempt(TASKS[3], Expert(), 0, screenshots=True)
    b = write_think_aloud(a, tmp_path, archive="zip")
    out = process_input(b, lake)
    assert not out.quarantined and len(out.episodes) == 1
    ep = out.episodes[0]
    assert [s.action for s in ep.steps] == [s.action for s in a.steps]
    assert all(s.thought for s in ep.steps)


def test_attempt_to_episode_carries_the_verdict() -> None:
    a = run_attempt(TASKS[1], Expert(), 0)
    ep = to_episode(a, "rollout", "sess-1")
    assert ep.env_passed and ep.final_answer == TASKS[1].reference_answer and ep.task_family == "answer"
    assert ep.steps[0].observation == a.steps[0].observation and ep.episode_id
    assert to_episode(a, "rollout", "sess-1").episode_id == ep.episode_id
