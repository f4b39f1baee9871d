"""Precision chosen by measurement (training/precision.py) and the demo sized to a wall-time budget
(flows/budget.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from flows.budget import REF_MINUTES, REF_ROUNDS, REF_STEP_S, fit, scaled
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


def test_a_measurement_on_a_busy_machine_is_not_cached(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLYWHEEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(P, "_MEMO", {})
    monkeypatch.setattr(P, "_quiet_machine", lambda: False)
    assert P.choose("auto", _tiny_model(), batch=2, seq=8).source == "measured"
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


def test_a_machine_as_fast_as_the_reference_keeps_the_full_sizes() -> None:
    cfg = round_config(people="scripted")
    got, f = fit(cfg, 20, REF_ROUNDS, REF_STEP_S, {"precision": "bf16"})
    assert got == cfg and f.scale == 1 and f.estimate_min == pytest.approx(REF_MINUTES)
    assert "full sizes" in f.why()


def test_a_slower_machine_gets_fewer_sft_passes_that_fit_the_budget() -> None:
    cfg = round_config(people="scripted")
    got, f = fit(cfg, 20, REF_ROUNDS, REF_STEP_S * 1.7, {"precision": "fp32"})
    assert f.estimate_min > 20 and f.fitted_min == pytest.approx(20, abs=0.1) and 0.25 <= f.scale < 1
    s0, s1 = cfg.flywheel.sft, got.flywheel.sft
    assert s1.epochs == pytest.approx(s0.epochs * f.scale) and s1.max_steps < s0.max_steps
    assert got.flywheel.cold_sft.steps < cfg.flywheel.cold_sft.steps
    # what is measured stays: the held-out set, the annotation and sampling sizes
    assert (got.eval_per_cell, got.annotate_tasks, got.flywheel.sampling) == (
        cfg.eval_per_cell,
        cfg.annotate_tasks,
        cfg.flywheel.sampling,
    )
    assert "scaled to" in f.why()


def test_scaling_never_goes_below_the_floor() -> None:
    cfg = round_config()
    _, f = fit(cfg, 1, REF_ROUNDS, REF_STEP_S * 10, {})
    assert f.scale == 0.25
    assert scaled(cfg, 1.0) is cfg
    assert scaled(replace(cfg), 0.5).flywheel.sft.max_steps == cfg.flywheel.sft.max_steps // 2
