"""The round engine's decisions, without Prefect or subprocesses: which stages are due, which checkpoint each stage
starts from, which rounds may run or resume, and where the configuration comes from."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from flows.config import RoundConfig, load_round_config, recorded_config, resolve_config, resolve_landing, round_config
from flows.round import _pick_round
from flows.stages import (
    RoundStateError,
    acting_checkpoint,
    base_checkpoint,
    due_stages,
    final_checkpoint,
    landing_inputs,
    mark,
    next_round,
    pending_stages,
    record_config,
    round_state,
)
from validators.rounds import read_round

CFG = RoundConfig()  # ct every 2 rounds, rl every round from 1, sampling and annotation on


def _done(lake, round: int, stage: str, **info) -> None:
    mark(lake, round, stage, "done", **info)


def test_round_zero_has_no_model_to_act_with_and_trains_only_sft() -> None:
    assert due_stages(0, CFG) == ["intake", "route", "sft", "evaluate", "summary"]


def test_later_rounds_sample_and_annotate_first_ct_when_due() -> None:
    assert due_stages(1, CFG) == ["sample", "annotate", "intake", "route", "sft", "rl", "evaluate", "summary"]
    assert due_stages(2, CFG) == ["sample", "annotate", "intake", "route", "ct", "sft", "rl", "evaluate", "summary"]


def test_sizes_of_zero_switch_stages_off() -> None:
    f = CFG.flywheel
    off = replace(CFG, annotate_tasks=0, flywheel=replace(f, sampling=replace(f.sampling, tasks=0), rl_every=0))
    assert due_stages(1, off) == ["intake", "route", "sft", "evaluate", "summary"]


def test_the_round_warms_acting_helpers_only_for_a_stage_that_splits() -> None:
    """A helper process is warmed when a pending acting stage has 32 tasks per process (the default round: 96
    sampled, 480 annotation and 280 held-out tasks, two processes), never for stages that do not act, a tiny
    round's few tasks, or a backend whose tasks share a browser pool (MiniWoB++: they act in-process)."""
    from flows.round import _acting_processes

    acting = ["sample", "annotate", "evaluate"]
    assert _acting_processes(CFG, acting) == 2
    assert _acting_processes(CFG, ["evaluate", "summary"]) == 2
    assert _acting_processes(CFG, ["intake", "route", "sft", "rl", "summary"]) == 1
    f = CFG.flywheel
    tiny = replace(CFG, annotate_tasks=4, eval_per_cell=1, flywheel=replace(f, sampling=replace(f.sampling, tasks=6)))
    assert _acting_processes(tiny, acting) == 1  # 6, 4 and 35 tasks: under two processes' worth
    assert _acting_processes(replace(tiny, annotate_tasks=64), acting) == 2  # one stage that splits is enough
    one = replace(
        CFG, flywheel=replace(f, sampling=replace(f.sampling, processes=1), eval=replace(f.eval, processes=1))
    )
    assert _acting_processes(one, acting) == 1
    assert _acting_processes(replace(CFG, env="miniwob"), acting) == 1


def test_pending_skips_done_stages_and_state_follows_the_summary(lake) -> None:
    assert round_state(lake, 1) == "new"
    _done(lake, 1, "sample")
    _done(lake, 1, "annotate")
    assert pending_stages(lake, 1, CFG)[0] == "intake"
    assert round_state(lake, 1) == "incomplete"
    mark(lake, 1, "intake", "failed", error="boom")
    assert pending_stages(lake, 1, CFG)[0] == "intake"  # a failed stage is redone
    for s in ("intake", "route", "sft", "rl", "evaluate", "summary"):
        _done(lake, 1, s)
    assert round_state(lake, 1) == "done" and pending_stages(lake, 1, CFG) == []


def test_checkpoints_come_from_the_recorded_chain_not_the_newest(lake) -> None:
    _done(lake, 0, "sft", checkpoint="objects/r0-sft")
    assert base_checkpoint(lake, 0, "sft") is None  # round 0: a fresh model from the config
    assert final_checkpoint(lake, 0) == "objects/r0-sft"
    assert acting_checkpoint(lake, 1) == "objects/r0-sft"  # sample and annotate act with round 0's model
    assert base_checkpoint(lake, 2, "ct") == "objects/r0-sft"  # round 1 trained nothing: walk back to round 0
    _done(lake, 2, "ct", checkpoint="objects/r2-ct")
    mark(lake, 2, "sft", "running")
    assert base_checkpoint(lake, 2, "sft") == "objects/r2-ct"  # the stage before it in the same round
    assert base_checkpoint(lake, 2, "rl") == "objects/r2-ct"  # sft has not finished: it is not in the chain
    _done(lake, 2, "sft", checkpoint="objects/r2-sft")
    assert base_checkpoint(lake, 2, "rl") == "objects/r2-sft"
    # a later, unrelated checkpoint (an export, another run) changes nothing: only recorded stages count
    assert final_checkpoint(lake, 2) == "objects/r2-sft"


def test_acting_without_any_checkpoint_is_refused(lake) -> None:
    with pytest.raises(RoundStateError, match="no earlier checkpoint"):
        acting_checkpoint(lake, 1)


def test_a_finished_round_is_refused_and_an_unfinished_one_must_be_resumed(lake) -> None:
    assert next_round(lake) == 0 and _pick_round(lake, None, False) == 0
    for s in due_stages(0, CFG):
        _done(lake, 0, s)
    assert next_round(lake) == 1
    with pytest.raises(RoundStateError, match="already finished"):
        _pick_round(lake, 0, False)
    with pytest.raises(RoundStateError, match="nothing to resume"):
        _pick_round(lake, 0, True)
    _done(lake, 1, "sample")
    with pytest.raises(RoundStateError, match="flywheel round resume 1"):
        next_round(lake)
    with pytest.raises(RoundStateError, match="already started"):
        _pick_round(lake, 1, False)
    assert _pick_round(lake, 1, True) == 1
    with pytest.raises(RoundStateError, match="flywheel round resume 1"):  # round 1 first
        _pick_round(lake, 5, True)
    for s in due_stages(1, CFG):
        _done(lake, 1, s)
    with pytest.raises(RoundStateError, match="has not started"):
        _pick_round(lake, 5, True)


def test_config_files_load_nested_and_refuse_unknown_keys(tmp_path: Path) -> None:
    p = tmp_path / "round.toml"
    p.write_text('people = "scripted"\nannotate_tasks = 7\n[flywheel.sft]\nsteps = 3\n')
    cfg = load_round_config(p)
    assert cfg.people == "scripted" and cfg.annotate_tasks == 7 and cfg.flywheel.sft.steps == 3
    assert cfg.flywheel.sampling == RoundConfig().flywheel.sampling  # the rest stays default
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"flywheel": {"sft": {"stpes": 3}}}))
    with pytest.raises(ValueError, match="unknown option.*stpes"):
        load_round_config(bad)
    with pytest.raises(ValueError, match="people must be one of"):
        RoundConfig(people="robots")


def test_the_demo_config_is_the_production_config_with_scripted_people() -> None:
    prod, demo = round_config(), round_config(people="scripted")
    assert replace(demo, people="humans") == prod
    mw = round_config("miniwob", ["click-button"])
    assert mw.env == "miniwob" and mw.env_tasks == ("click-button",) and mw.annotate_tasks < prod.annotate_tasks
    # the sandbox's prompt shows eight past actions (level 5 needs them); MiniWoB++ keeps the two it was measured with
    assert prod.flywheel.prompt.history_max == 8 and mw.flywheel.prompt.history_max == 2
    assert replace(mw.flywheel.prompt, history_max=8) == prod.flywheel.prompt
    with pytest.raises(ValueError, match="--tasks is for --env miniwob"):
        round_config("sandbox", ["click-button"])


def test_a_lake_continues_with_the_config_and_landing_its_last_round_recorded(lake, tmp_path, monkeypatch) -> None:
    from core.settings import reset_settings_cache

    monkeypatch.delenv("FLYWHEEL_LANDING", raising=False)
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(tmp_path / "none.toml"))
    reset_settings_cache()
    assert recorded_config(lake) is None and resolve_config(lake)[1] == "the defaults"
    demo = round_config(people="scripted", annotate=5)
    record_config(lake, 0, demo, tmp_path / "demo-landing")
    cfg, where = resolve_config(lake)
    assert cfg == demo and where == "the lake's last round"
    assert read_round(lake, 0).config["people"] == "scripted" and read_round(lake, 0).config["annotate_tasks"] == 5
    assert resolve_landing(lake) == str(tmp_path / "demo-landing")
    assert resolve_landing(lake, "given") == "given"
    assert resolve_config(lake, env="sandbox")[0].people == "humans"  # told otherwise: the shipped config
    monkeypatch.setenv("FLYWHEEL_LANDING", str(tmp_path / "mine"))
    from core.settings import reset_settings_cache

    reset_settings_cache()
    try:
        assert resolve_landing(lake) == str(tmp_path / "mine")  # an explicit setting wins over the record
    finally:
        reset_settings_cache()


def test_landing_inputs_sort_uploads_and_skip_bookkeeping(tmp_path: Path) -> None:
    (tmp_path / "rollouts" / "x").mkdir(parents=True)
    (tmp_path / "rollouts" / "x" / "a.jsonl").write_text("")
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "s.json").write_text("{}")
    (tmp_path / "assignments").mkdir()
    (tmp_path / "assignments" / "round-1.json").write_text("{}")
    (tmp_path / ".cold-start-done").write_text("")
    (tmp_path / "bundle-1").mkdir()
    got = landing_inputs(tmp_path)
    assert got == {"rollouts": [tmp_path / "rollouts" / "x" / "a.jsonl"], "annotations": [tmp_path / "annotations"],
                   "think_aloud": [tmp_path / "bundle-1"]}  # fmt: skip
