"""MiniWoB++ attempts in the three input formats, read back by the real readers (into a real lake for rollouts)."""

from __future__ import annotations

import json
from pathlib import Path

from sandbox.miniwob import TaskSpec
from sandbox.miniwob.demonstrators import Interactive, Novice
from sandbox.miniwob.export import to_episode, write_annotations, write_rollout_file, write_think_aloud

SPECS = [TaskSpec("login-user", 4), TaskSpec("click-checkboxes", 6), TaskSpec("use-autocomplete", 2)]


def test_rollouts_land_in_the_lake_with_the_raw_reward(pool, lake, tmp_path: Path) -> None:
    from ingest.rollouts import ingest_rollout_file

    attempts = pool.run(SPECS, lambda: Novice(p_mistake=0.5), attempts=2, progress=False)
    assert write_rollout_file(attempts, tmp_path / "r.jsonl", "miniwob-novice") == 6
    res = ingest_rollout_file(lake, tmp_path / "r.jsonl")
    assert res.result.episodes_added == 6 and res.result.quarantined_added == 0
    rows = {(r["task_id"], r["attempt"]): r for r in lake.read("episodes").to_pylist()}
    for a in attempts:
        r = rows[(a.task.task_id, a.attempt)]
        assert r["app"] == "miniwob" and r["env_passed"] == a.passed and r["instruction"] == a.task.instruction
        assert [s["action"] for s in r["steps"]] == [s.action for s in a.steps]
    ep = to_episode(attempts[0], "rollout", "s1")
    assert (
        ep.app == "miniwob"
        and ep.meta["raw_reward"] == attempts[0].meta["raw_reward"]
        and ep.task_family == "login-user"
    )


def test_think_aloud_bundle_reduces_back_to_the_actions(pool, tmp_path: Path) -> None:
    from ingest.events import reduce_events
    from ingest.formats.bundle import BundleManifest
    from sandbox.export import action_events
    from schemas.actions import parse_action

    a = pool.run([SPECS[0]], Novice, progress=False)[0]
    b = write_think_aloud(a, tmp_path, speech=False)
    m = BundleManifest.from_json(json.loads((b / "manifest.json").read_text()))
    assert m.task_id == "miniwob/login-user/s4" and (m.screen_width, m.screen_height) == (160, 210)
    assert len(m.screenshots) == len(a.steps)
    events = [json.loads(ln) for ln in (b / "events.jsonl").read_text().splitlines()]
    assert [x.action for x in reduce_events(events)] == [
        parse_action(s.action) for s in a.steps if action_events(s.action)
    ]


def test_annotation_session_keeps_proposals_and_overrides(pool, tmp_path: Path) -> None:
    from ingest.annotations import read_session

    attempts = pool.run(
        [TaskSpec("click-button", s) for s in range(30, 36)], lambda: Interactive(p_mistake=0.6), progress=False
    )
    assert all(a.passed for a in attempts)  # the annotator's trajectory is the expert's
    decisions = [s.decision for a in attempts for s in a.steps]
    assert "overridden" in decisions and "accepted" in decisions
    got = read_session(write_annotations(attempts, tmp_path / "s.json", model_version="miniwob-novice"))
    assert len(got.episodes) == 6 and not got.quarantined
    assert [s.decision for ep in got.episodes for s in ep.steps] == decisions
