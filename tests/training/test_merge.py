"""Merging specialists by parameter interpolation: exact at the corners, refused across lineages or shapes, and the
merged checkpoint is a checkpoint like any other (loads, generates, trains)."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from training.merge import MergeError, Specialist, check_alphas, lineage, merge_job, merge_policies

FLYWHEEL = str(Path(sys.executable).with_name("flywheel"))


def _nudged(policy, seed: int):
    """A copy with every weight moved a little: a stand-in for a specialist's training."""
    p = copy.deepcopy(policy)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in p.parameters():
            t.add_(torch.randn(t.shape, generator=g) * 0.01)
    return p


def _grown(lake, base_uri: str, policy, stage: str = "rl") -> str:
    """Publish `policy` as a training run from `base_uri` (the lineage a real job records)."""
    from training.jobs import finish
    from training.runs import JobResult

    return finish(lake, JobResult(stage, 1, base_uri), policy, time.perf_counter()).output_checkpoint


@pytest.fixture
def family(lake, tiny_policy):
    """A base checkpoint and two specialists grown from it (one by two runs), plus an unrelated checkpoint."""
    from training.checkpoints import publish

    base = publish(lake, tiny_policy)
    a = _grown(lake, base, _nudged(tiny_policy, 1))
    b_mid = _grown(lake, base, _nudged(tiny_policy, 2), "sft")
    b = _grown(lake, b_mid, _nudged(tiny_policy, 3))
    stranger = publish(lake, _nudged(tiny_policy, 4))
    return base, a, b, stranger


def test_alphas_one_and_zero_give_the_first_specialist_bit_for_bit(tiny_policy) -> None:
    a, b = _nudged(tiny_policy, 1), _nudged(tiny_policy, 2)
    m = merge_policies({"a": a, "b": b}, {"a": 1.0, "b": 0.0})
    for (k, x), (_, y) in zip(a.model.state_dict().items(), m.model.state_dict().items(), strict=True):
        assert torch.equal(x, y), k
    assert all(
        torch.equal(x, y) for x, y in zip(a.value_head.state_dict().values(), m.value_head.state_dict().values())
    )
    half = merge_policies({"a": a, "b": b}, {"a": 0.5, "b": 0.5})
    w = "model.embed_tokens.weight"
    mean = (a.model.state_dict()[w] + b.model.state_dict()[w]) / 2
    assert torch.allclose(half.model.state_dict()[w], mean, atol=1e-7)
    assert not torch.equal(half.model.state_dict()[w], a.model.state_dict()[w])


@pytest.mark.parametrize(
    ("alphas", "message"),
    [({"a": 0.7, "b": 0.7}, "sum to 1"), ({"a": 1.5, "b": -0.5}, ">= 0"), ({"a": float("nan"), "b": 1.0}, ">= 0"),
     ({}, "no specialists")],
)  # fmt: skip
def test_alphas_must_be_a_convex_combination(alphas, message) -> None:
    with pytest.raises(MergeError, match=message):
        check_alphas(alphas)


def test_different_shapes_or_parameters_are_refused(tiny_policy) -> None:
    from training.config import ModelConfig
    from training.model import Policy, build_model

    wider = Policy(build_model(tiny_policy.tokenizer, ModelConfig(hidden_size=64, intermediate_size=96,
                                                                 num_hidden_layers=2, num_attention_heads=2)),
                   tiny_policy.tokenizer, copy.deepcopy(tiny_policy.value_head))  # fmt: skip
    with pytest.raises(MergeError, match="differ|different parameters") as e:
        merge_policies({"a": tiny_policy, "b": wider}, {"a": 0.5, "b": 0.5})
    assert "\n" not in str(e.value)


def test_lineage_follows_the_recorded_runs_and_strangers_are_refused(lake, family) -> None:
    base, a, b, stranger = family
    assert lineage(lake, a) == [base]
    assert lineage(lake, b)[-1] == base and len(lineage(lake, b)) == 2
    with pytest.raises(MergeError, match="did not grow from"):
        merge_job(lake, base, [Specialist("a", a, 0.5), Specialist("x", stranger, 0.5)])


def test_the_merged_checkpoint_is_recorded_loads_generates_and_trains(lake, family) -> None:
    from training.checkpoints import fetch
    from training.config import SFTConfig
    from training.data import encode_all
    from training.generate import sample
    from training.sft import train_sft

    base, a, b, _ = family
    res, merged = merge_job(lake, base, [Specialist("a", a, 0.25), Specialist("b", b, 0.75)], round=2)
    row = [r for r in lake.read("training_runs").to_pylist() if r["output_checkpoint"] == res.output_checkpoint]
    assert len(row) == 1 and row[0]["stage"] == "merge" and row[0]["base_checkpoint"] == base
    assert '"alphas": {"a": 0.25, "b": 0.75}' in row[0]["config"]
    p = fetch(lake, res.output_checkpoint)
    w = "model.layers.0.mlp.up_proj.weight"
    pa_, pb_ = fetch(lake, a).model.state_dict()[w], fetch(lake, b).model.state_dict()[w]
    assert torch.allclose(p.model.state_dict()[w], 0.25 * pa_ + 0.75 * pb_, atol=1e-7)
    out = sample(
        p.model, p.tokenizer, [p.tokenizer.encode("Instruction: Click OK\n")], 8, 1.0, torch.Generator().manual_seed(0)
    )
    assert len(out[0].token_ids) >= 1
    before = {k: v.clone() for k, v in p.model.state_dict().items()}
    items = encode_all(p.tokenizer, [("Instruction: Click OK\nObservation:\nbutton \"OK\" (3,4)\n",
                                      "Thought: OK\nAction: click(point='<point>3 4</point>')")] * 4)  # fmt: skip
    losses, _ = train_sft(p, items, SFTConfig(steps=3, batch_size=2))
    assert losses and all(l == l for l in losses)
    assert any(not torch.equal(before[k], v) for k, v in p.model.state_dict().items())


def test_merge_command_records_a_checkpoint_and_refuses_bad_alphas_in_one_line(lake, family) -> None:
    base, a, b, _ = family
    cmd = [
        FLYWHEEL,
        "merge",
        "--lake",
        str(lake.uri),
        "--base",
        base,
        "--specialist",
        f"a={a}",
        "--specialist",
        f"b={b}",
    ]
    ok = subprocess.run([*cmd, "--alpha", "a=0.5", "--alpha", "b=0.5"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "merged a=0.5, b=0.5 into" in ok.stdout
    bad = subprocess.run([*cmd, "--alpha", "a=0.5", "--alpha", "b=0.6"], capture_output=True, text=True)
    assert bad.returncode != 0 and "alphas must sum to 1" in bad.stderr + bad.stdout
    assert len((bad.stderr + bad.stdout).strip().splitlines()) == 1


def test_the_sweep_evaluates_every_alpha_on_every_world_and_keeps_the_best_worst_world(lake, family) -> None:
    import json

    from schemas.prompt import PromptConfig
    from training.config import EvalConfig
    from training.envs import env_backend
    from training.merge import GRID, sweep

    base, a, b, _ = family
    tasks = env_backend("sandbox").heldout_tasks(1)
    worlds = {"forms": [t for t in tasks if t.family in ("fill_form", "checkboxes")],
              "menus": [t for t in tasks if t.family in ("menu_path", "popup")]}  # fmt: skip
    assert all(worlds.values())
    points, base_rates, res = sweep(lake, base, ("a", a), ("b", b), worlds, EvalConfig(max_new_tokens=16),
                                    PromptConfig())  # fmt: skip
    assert [p.alpha for p in points] == list(GRID) and set(base_rates) == {"forms", "menus"}
    assert all(p.rates["forms"].n == len(worlds["forms"]) for p in points)
    kept = max(points, key=lambda p: (p.worst(), p.mean(), -abs(p.alpha - 0.5)))
    row = [r for r in lake.read("training_runs").to_pylist() if r["output_checkpoint"] == res.output_checkpoint][0]
    curve = json.loads(row["metrics"])["sweep"]
    assert curve["kept_alpha"] == kept.alpha and len(curve["points"]) == len(GRID)
    assert json.loads(row["config"])["merge"]["alphas"] == {"a": kept.alpha, "b": 1.0 - kept.alpha}
