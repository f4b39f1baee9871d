"""Precision chosen by measurement (training/precision.py) and the demo sized to a wall-time budget
(flows/budget.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from flows.budget import (
    MARGIN,
    MIN_SCALE,
    OTHER_GROWTH,
    REF_MINUTES,
    REF_R0_OTHER_S,
    REF_R0_SFT_S,
    REF_ROUNDS,
    REF_START_MIN,
    REF_STEP_S,
    SEARCH_FLOOR,
    SFT_FLOOR,
    SFT_GROWTH,
    correct,
    give_back,
    project,
    refit,
    scaled,
    sft_stop_at,
)
from flows.config import round_config, with_precision
from training import precision as P


def _tiny_model() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2))  # fmt: skip


def test_a_fixed_setting_is_used_as_is_without_measuring(monkeypatch) -> None:
    monkeypatch.setattr(P, "measure", lambda *a, **k: pytest.fail("measured a fixed setting"))
    assert P.choose(True, _tiny_model()).bf16 is True
    assert P.choose(False, _tiny_model()).name == "fp32"


def test_auto_measures_once_then_reads_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLYWHEEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(P, "_MEMO", {})
    monkeypatch.setattr(P, "_quiet_machine", lambda: True)
    model = _tiny_model()
    first = P.choose("auto", model, batch=2, seq=8)
    assert first.source == "measured" and first.fp32_tok_s > 0 and first.bf16_tok_s > 0
    assert first.bf16 == (first.bf16_tok_s * P.MARGIN > first.fp32_tok_s)  # bf16 only when clearly faster
    key = P.machine_key(model, 2, 8)
    assert json.loads((tmp_path / "precision.json").read_text())[key]["bf16"] == first.bf16
    monkeypatch.setattr(P, "_MEMO", {})  # a new process: the file answers
    monkeypatch.setattr(P, "measure", lambda *a, **k: pytest.fail("measured again"))
    again = P.choose("auto", model, batch=2, seq=8)
    assert again.source == "cache" and again.bf16 == first.bf16


def test_a_busy_machine_trains_in_fp32_without_measuring_or_caching(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLYWHEEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(P, "_MEMO", {})
    monkeypatch.setattr(P, "_quiet_machine", lambda: False)
    monkeypatch.setattr(P, "measure", lambda *a, **k: pytest.fail("measured under load"))
    got = P.choose("auto", _tiny_model(), batch=2, seq=8)
    assert (got.source, got.bf16) == ("busy", False)  # the same choice in every process, whatever the timings
    assert not (tmp_path / "precision.json").exists()


def test_measuring_leaves_the_weights_as_they_were() -> None:
    model = _tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    P.measure(model, batch=2, seq=8, steps=1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_precision_option_reaches_every_lm_job() -> None:
    cfg = with_precision(round_config(), "fp32")
    assert {cfg.flywheel.cold_sft.optim.bf16, cfg.flywheel.sft.optim.bf16, cfg.flywheel.ct.optim.bf16} == {False}
    assert round_config().flywheel.sft.optim.bf16 == "auto"
    with pytest.raises(ValueError, match="precision must be one of"):
        with_precision(round_config(), "fp8")


def _round0(slower: float, sft_slower: float | None = None) -> dict:
    """Round 0's recorded stages on a machine `slower` times the reference (its SFT `sft_slower` times)."""
    sft = REF_R0_SFT_S * (sft_slower or slower)
    return {"sft": {"seconds": sft}, "intake": {"seconds": 9.4 * slower}, "route": {"seconds": 2.7 * slower},
            "evaluate": {"seconds": (REF_R0_OTHER_S - 12.1) * slower}, "summary": {"seconds": 0.0}}  # fmt: skip


def _elapsed(slower: float) -> float:
    return REF_START_MIN + (REF_R0_SFT_S + REF_R0_OTHER_S) * slower / 60


def test_the_reference_machine_with_room_keeps_the_full_sizes() -> None:
    cfg = replace(round_config(people="scripted"), rl_effect=False)  # the reference run's stages
    got, f = refit(cfg, REF_MINUTES + 0.5, _elapsed(1.0), _round0(1.0), REF_ROUNDS)
    assert got == cfg and f.scale == 1 and f.estimate_min == pytest.approx(REF_MINUTES, abs=0.05)
    assert f.sft_ratio == pytest.approx(1.0) and f.other_ratio == pytest.approx(1.0)
    assert "full sizes" in f.why()
    assert project(REF_STEP_S, REF_ROUNDS) == pytest.approx(REF_MINUTES)


def test_measuring_rl_s_share_budgets_one_more_evaluation_in_every_rl_round() -> None:
    cfg = round_config(people="scripted")
    assert cfg.rl_effect and not round_config("miniwob").rl_effect  # a browser evaluation is 170 s: on request there
    _, without = refit(replace(cfg, rl_effect=False), 60, _elapsed(1.0), _round0(1.0), REF_ROUNDS)
    _, with_ = refit(cfg, 60, _elapsed(1.0), _round0(1.0), REF_ROUNDS)
    eval_min = (REF_R0_OTHER_S - 12.1) / 60  # round 0's evaluate stage, as _round0 records it
    assert with_.estimate_min - without.estimate_min == pytest.approx(REF_ROUNDS * eval_min)  # RL runs in rounds 1-3


def test_practice_by_search_budgets_its_clock_in_every_rl_round() -> None:
    cfg = replace(round_config(people="scripted"), rl_effect=False)
    search = replace(cfg, rl_mode="search", flywheel=replace(cfg.flywheel, search=replace(cfg.flywheel.search,
                                                                                          time_budget_s=90)))  # fmt: skip
    _, joint = refit(cfg, 60, _elapsed(1.0), _round0(1.0), REF_ROUNDS)
    _, by_search = refit(search, 60, _elapsed(1.0), _round0(1.0), REF_ROUNDS)
    assert by_search.estimate_min - joint.estimate_min == pytest.approx(REF_ROUNDS * 1.5)  # 90 s in rounds 1-3


def test_a_slower_machine_gets_fewer_later_sft_passes_that_fit_what_is_left() -> None:
    cfg = round_config(people="scripted")
    got, f = refit(cfg, 20, _elapsed(1.05), _round0(1.05, sft_slower=1.1), REF_ROUNDS)
    assert f.sft_ratio == pytest.approx(1.1) and f.other_ratio == pytest.approx(1.05)
    assert f.estimate_min > 20 and f.fitted_min == pytest.approx(20 * MARGIN, abs=0.05) and 0.25 <= f.scale < 1
    s0, s1 = cfg.flywheel.sft, got.flywheel.sft
    assert s1.epochs == pytest.approx(s0.epochs * f.scale) and s1.max_steps < s0.max_steps
    assert got.flywheel.cold_sft == cfg.flywheel.cold_sft  # round 0 has run at full size: it was the measurement
    # what is measured stays: the held-out set, the annotation and sampling sizes
    assert (got.eval_per_cell, got.annotate_tasks, got.flywheel.sampling) == (
        cfg.eval_per_cell,
        cfg.annotate_tasks,
        cfg.flywheel.sampling,
    )
    assert "scaled to" in f.why()


def test_scaling_never_goes_below_the_floor() -> None:
    cfg = round_config()
    _, f = refit(cfg, 1, _elapsed(10), _round0(10), REF_ROUNDS)
    assert f.scale == MIN_SCALE
    assert scaled(cfg, 1.0) is cfg
    assert scaled(replace(cfg), 0.5).flywheel.sft.max_steps == cfg.flywheel.sft.max_steps // 2


def test_the_demo_decides_once_after_round_zero_and_a_rerun_reuses_it(lake) -> None:
    from flows.demo import _fit_round
    from validators.rounds import read_round

    cfg = round_config(people="scripted")
    mark_stages(lake, 0, _round0(1.3))
    said = []
    started = __import__("time").time() - 60 * _elapsed(1.3)
    later = _fit_round(lake, cfg, cfg, 1, 20, started, REF_ROUNDS, lambda kind, info: said.append((kind, info)))
    rec = read_round(lake, 1).breakdown["budget"]
    assert 0.25 <= rec["scale"] < 1 and later.flywheel.sft.max_steps < cfg.flywheel.sft.max_steps
    assert said and said[0][0] == "budget" and "scaled to" in said[0][1]["why"]
    again = _fit_round(lake, cfg, later, 1, 20, started - 3600, REF_ROUNDS, lambda *a: said.append(a))
    assert again == later and len(said) == 1  # the recorded decision, not a new one from a later clock


#: A later round as demo run q measured it (2026-12-05): its SFT 208 steps in 41.5 s, 276.5 s of other stages.
ROUND1 = {"sft": {"seconds": 41.5}, "annotate": {"seconds": 57.0}, "evaluate": {"seconds": 44.6},
          "intake": {"seconds": 2.0}, "rl": {"seconds": 153.6}, "route": {"seconds": 0.6}, "sample": {"seconds": 18.7}}  # fmt: skip


def test_a_later_round_resizes_the_rounds_after_it_from_its_own_seconds() -> None:
    cfg = round_config(people="scripted")
    sft = cfg.flywheel.sft
    got, c = correct(cfg, 20, 7.2, 1, ROUND1, 208, [902, 3804], 2)
    assert c.other_s == pytest.approx(276.5) and c.sft_s_per_step == pytest.approx(41.5 / 208)
    # the piles grow by their last growth: 6,706 and 9,608 examples at full size
    # and a step by SFT_GROWTH a round
    full = sft.steps_for(6706) * SFT_GROWTH + sft.steps_for(9608) * SFT_GROWTH**2
    assert c.fitted_min == pytest.approx(20 * MARGIN, abs=0.01) and 0.25 < c.scale < 1
    assert c.fitted_min == pytest.approx(7.2 + (2 * 276.5 * OTHER_GROWTH + c.scale * 41.5 / 208 * full) / 60)
    assert got.flywheel.sft.max_steps == math.ceil(sft.max_steps * c.scale)
    # a minute more already spent: less SFT for the rest; a round that ran fast leaves more
    assert correct(cfg, 20, 8.2, 1, ROUND1, 208, [902, 3804], 2)[1].scale < c.scale
    assert correct(cfg, 20, 7.2, 1, ROUND1, 208 * 2, [902, 3804], 2)[1].scale > c.scale
    assert correct(cfg, 60, 7.2, 1, ROUND1, 208, [902, 3804], 2)[1].scale == 1  # room: full sizes
    assert correct(cfg, 10, 7.2, 1, ROUND1, 208, [902, 3804], 2)[1].scale == MIN_SCALE
    assert "round 1 took 4.6 min besides its SFT" in c.why()


def test_the_demo_corrects_each_later_round_from_the_round_before(lake, monkeypatch) -> None:
    import flows.demo as demo
    from validators.rounds import read_round

    cfg = round_config(people="scripted")
    mark_stages(lake, 1, ROUND1)
    monkeypatch.setattr(demo, "_sft_runs", lambda lk: {0: (902, 400), 1: (3804, 208)})
    said = []
    started = __import__("time").time() - 60 * 7.2
    got = demo._fit_round(lake, cfg, cfg, 2, 20, started, REF_ROUNDS, lambda kind, info: said.append(info))
    rec = read_round(lake, 2).breakdown["budget"]
    assert rec["after_round"] == 1 and rec["piles"] == [902, 3804] and 0.25 < rec["scale"] < 1
    assert got == scaled(cfg, rec["scale"]) and said[0]["round"] == 2
    assert demo._fit_round(lake, cfg, got, 2, 20, started - 3600, REF_ROUNDS, said.append) == got and len(said) == 1


def _by_search(seconds: float = 150.0):
    cfg = round_config(people="scripted")
    search = replace(cfg.flywheel.search, time_budget_s=seconds)
    return replace(cfg, rl_mode="search", flywheel=replace(cfg.flywheel, search=search))


#: Demo run z2's round 2 (2026-12-05, a slower spell of the host): 276 SFT steps in 55 s, a 150-second search.
ROUND2 = {"sft": {"seconds": 55.0}, "annotate": {"seconds": 72.19}, "ct": {"seconds": 2.66},
          "evaluate": {"seconds": 34.88}, "intake": {"seconds": 3.66}, "rl": {"seconds": 158.12},
          "route": {"seconds": 0.72}, "sample": {"seconds": 20.09}}  # fmt: skip


def test_what_gives_when_the_sft_floor_does_not_fit_goes_in_order_of_what_it_added() -> None:
    room = 150 * (1 - SEARCH_FLOOR)  # 75 s a search
    sft = 200.0  # the rounds to come's SFT seconds at full size: 50 s at the 25% floor
    assert give_back(0, 0.25, sft, 150, 2) == (0.25, 150, 0) and give_back(40, 0.25, sft, 150, 0) == (0.25, 150, 0)
    assert give_back(40, 0.25, sft, 150, 2) == (0.25, 150, 40)  # the last round's search alone: the next keeps its
    assert give_back(40, 0.25, sft, 150, 1) == (0.25, 110, 40)  # the next round is the last
    scale, nxt, cut = give_back(room + 10, 0.25, sft, 150, 2)  # then the SFT below its floor
    assert scale == pytest.approx(0.25 - 10 / sft) and (nxt, cut) == (150, room)
    floor_saves = (0.25 - SFT_FLOOR) * sft  # 30 s
    assert give_back(room + floor_saves + 20, 0.25, sft, 150, 2) == (SFT_FLOOR, 130, room + 20)  # then the earlier
    assert give_back(10_000, 0.25, sft, 150, 3) == (SFT_FLOOR, 150 * SEARCH_FLOOR, 3 * room)  # never below the floors


def test_when_the_sft_floor_does_not_fit_the_search_gives_the_rest() -> None:
    cfg = _by_search()
    # after z2's round 2 (13.8 min spent): the SFT floor alone projected 20.2 min, and the run took 20.4
    got, c = correct(cfg, 20, 13.806, 2, ROUND2, 276, [902, 3883, 7045], 1)
    assert c.scale == MIN_SCALE and 150 * SEARCH_FLOOR < c.search_s < 150 and c.search_full_s == 150
    assert c.fitted_min == pytest.approx(20 * MARGIN, abs=0.01) and c.search_cut_s == pytest.approx(150 - c.search_s)
    assert got.flywheel.search.time_budget_s == c.search_s and got.flywheel.sft == scaled(cfg, MIN_SCALE).flywheel.sft
    # a minute more spent: the last search at its floor, then the SFT below its own
    later = correct(cfg, 20, 14.806, 2, ROUND2, 276, [902, 3883, 7045], 1)[1]
    assert later.search_s == 150 * SEARCH_FLOOR and SFT_FLOOR < later.scale < MIN_SCALE
    assert later.fitted_min == pytest.approx(20 * MARGIN, abs=0.01)
    assert "searches to come" in c.why() and c.as_dict()["search_s"] == c.search_s
    # the search runs on its clock: a round whose search was cut is projected at the full seconds
    less = correct(cfg, 20, 13.806, 2, ROUND2 | {"rl": {"seconds": 108.12}}, 276, [902, 3883, 7045], 1, 100.0)[1]
    assert less.fitted_min == pytest.approx(c.fitted_min) and less.search_s == pytest.approx(c.search_s, abs=0.1)
    # room: the SFT scale gives first, the search is untouched
    room = correct(cfg, 22, 13.806, 2, ROUND2, 276, [902, 3883, 7045], 1)[1]
    assert room.scale > MIN_SCALE and (room.search_s, room.search_cut_s) == (150, 0) and "search" not in room.why()
    # two rounds to come: the last gives first, so the next keeps its seconds
    two = correct(cfg, 20, 8.2, 1, ROUND2, 276, [902, 3883], 2)[1]
    assert two.scale == MIN_SCALE and two.search_s == 150 and two.search_cut_s > 0
    # demo run a's round 1 (8.7 min spent, 130 s over at the floor): round 2's search is kept, SFT gives the rest
    two = correct(cfg, 20, 8.7, 1, ROUND2, 276, [902, 3883], 2)[1]
    assert two.search_s == 150 and two.search_cut_s == 75 and SFT_FLOOR < two.scale < MIN_SCALE
    # no search, nothing to cut (the joint RL stage is not on a clock)
    joint = correct(round_config(people="scripted"), 20, 13.806, 2, ROUND2, 276, [902, 3883, 7045], 1)[1]
    assert joint.search_s is None and joint.fitted_min > 20 * MARGIN


def test_after_round_zero_a_slow_machine_cuts_the_later_searches_too() -> None:
    cfg = _by_search()
    z2 = {"sft": {"seconds": 72.48}, "intake": {"seconds": 19.84}, "route": {"seconds": 2.86},
          "evaluate": {"seconds": 22.1}, "summary": {"seconds": 0.04}}  # demo run z2's round 0  # fmt: skip
    got, f = refit(cfg, 20, 2.676, z2, REF_ROUNDS)
    assert f.search_cut_s == 75 and SFT_FLOOR < f.scale < MIN_SCALE  # the last search, then the SFT below its floor
    assert f.fitted_min == pytest.approx(20 * MARGIN, abs=0.01) and "SFT passes and step cap scaled to 18%" in f.why()
    assert f.search_s == 150 and got.flywheel.search.time_budget_s == 150  # round 1's search is the last to give
    _, slow = refit(cfg, 20, _elapsed(1.3), _round0(1.3), REF_ROUNDS)  # every floor reached, and still over
    assert slow.search_s == 150 * SEARCH_FLOOR and slow.search_cut_s == 3 * 75 and slow.scale == SFT_FLOOR
    assert slow.fitted_min > 20
    _, joint = refit(round_config(people="scripted"), 20, _elapsed(1.3), _round0(1.3), REF_ROUNDS)
    assert joint.search_s is None and joint.search_cut_s == 0


def test_the_demo_reuses_a_recorded_search_cut_and_projects_the_next_round_from_it(lake, monkeypatch) -> None:
    import flows.demo as demo
    from validators.rounds import read_round, update_round

    cfg = _by_search()
    mark_stages(lake, 2, ROUND2 | {"rl": {"seconds": 108.12}})
    update_round(lake, 2, breakdown={"budget": {"scale": MIN_SCALE, "search_s": 100.0}})  # round 2's search was cut
    monkeypatch.setattr(demo, "_sft_runs", lambda lk: {0: (902, 400), 1: (3883, 152), 2: (7045, 276)})
    said = []
    started = __import__("time").time() - 60 * 13.806
    got = demo._fit_round(lake, cfg, cfg, 3, 20, started, REF_ROUNDS, lambda kind, info: said.append(info))
    rec = read_round(lake, 3).breakdown["budget"]
    assert rec["other_s"] == pytest.approx(sum(v["seconds"] for v in ROUND2.values()) - 55.0 - 50.0)
    assert 75 <= rec["search_s"] < 150 and got.flywheel.search.time_budget_s == rec["search_s"]
    assert rec["scale"] < 1 and got.flywheel.sft == cfg.flywheel.sft  # the last round: its SFT stops by the clock
    assert demo._fit_round(lake, cfg, got, 3, 20, started - 3600, REF_ROUNDS, said.append) == got and len(said) == 1


def mark_stages(lake, round: int, stages: dict) -> None:
    from flows.stages import mark

    for st, v in stages.items():
        mark(lake, round, st, "done", seconds=v["seconds"])


def test_the_last_round_s_sft_keeps_what_the_stages_after_it_took_the_round_before() -> None:
    after = ["rl", "evaluate", "summary"]
    prev = ROUND2 | {"summary": {"seconds": 0.2}}
    stop, keep = sft_stop_at(1000.0, _by_search(), after, prev)
    # the search's 150 s as they are, its 8.12 s of set-up and the evaluations and summary as they grow
    assert keep == pytest.approx(150 + (8.12 + 34.88 + 0.2) * OTHER_GROWTH) and stop == pytest.approx(1000 - keep)
    cut = sft_stop_at(1000.0, _by_search(100), after, prev, prev_search_s=150)[1]  # this round's search cut to 100 s
    assert cut == pytest.approx(keep - 50)
    was_cut = sft_stop_at(1000.0, _by_search(), after, prev | {"rl": {"seconds": 108.12}}, prev_search_s=100)[1]
    assert was_cut == pytest.approx(keep)  # the round before ran a cut search: its set-up is what it took beyond it
    joint = round_config(people="scripted")  # a PPO stage is no clock: it grows as the rest
    assert sft_stop_at(1000.0, joint, after, prev)[1] == pytest.approx((158.12 + 34.88 + 0.2) * OTHER_GROWTH)
    assert sft_stop_at(1000.0, _by_search(), ["evaluate"], prev)[1] == pytest.approx(34.88 * OTHER_GROWTH)


def test_a_round_given_an_end_stops_its_sft_by_the_clock_and_records_why(lake) -> None:
    import time
    from pathlib import Path

    from flows.stages import RoundContext, _sft_by_the_clock
    from validators.rounds import read_round, update_round

    cfg = _by_search()
    said = []
    end = time.time() + 600
    ctx = RoundContext(lake, 3, Path("landing"), cfg, lambda kind, info: said.append((kind, info)), end_by=end)
    assert _sft_by_the_clock(ctx) is None  # nothing recorded of round 2: the configured SFT, and it says so
    assert said.pop() == ("budget", {"round": 3, "why": "round 3's SFT runs as configured: no round before it recorded "
                                     "what the stages after the SFT take, so the end is not held"})  # fmt: skip
    mark_stages(lake, 2, ROUND2)
    update_round(lake, 2, breakdown={"config": _by_search(140).as_dict()})  # round 2's search ran 140 s
    got = _sft_by_the_clock(ctx)
    keep = 150 + (18.12 + 34.88) * OTHER_GROWTH  # round 2 recorded no summary stage
    assert got.optim.stop_at == pytest.approx(end - keep) and got.steps == cfg.flywheel.sft.steps
    assert read_round(lake, 3).breakdown["sft_clock"]["keep_s"] == pytest.approx(keep, abs=0.1)
    assert said[0][0] == "budget" and "round 3's SFT stops within" in said[0][1]["why"]


def test_a_training_loop_with_an_end_stops_by_it_and_its_learning_rate_follows_the_clock(monkeypatch) -> None:
    import time

    from training import loop
    from training.config import OptimConfig
    from training.data import Batch

    model = _tiny_model()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    batch = Batch(ids, torch.ones_like(ids), torch.ones(ids.shape))
    at: list[int] = []
    real = loop.lr_at
    monkeypatch.setattr(loop, "lr_at", lambda step, total, cfg: at.append(step) or real(step, total, cfg))

    def slow(n: int):
        for _ in range(n):
            time.sleep(0.05)
            yield batch

    losses, _ = loop.train_lm(model, slow(40), 40, OptimConfig(warmup_steps=2))
    assert len(losses) == 40 and at == list(range(40))  # no end: the steps alone
    at.clear()
    losses, _ = loop.train_lm(model, slow(40), 40, OptimConfig(warmup_steps=2, stop_at=time.time() + 0.6))
    assert 2 <= len(losses) < 40 and len(at) == len(losses)
    assert at == sorted(at) and at[-1] >= 20 and all(a >= i for i, a in enumerate(at))  # the clock ran ahead
    at.clear()
    losses, _ = loop.train_lm(model, slow(40), 40, OptimConfig(warmup_steps=3, stop_at=time.time() - 1))
    assert len(losses) == 3 and at[-1] == 40  # an end already past: the warm-up steps, the schedule at its end
