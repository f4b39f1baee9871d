"""Each built-in job changes the weights and lowers its loss on a tiny fixture; checkpoints chain job to job;
every job records its pile version, checkpoints and losses in training_runs."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pyarrow as pa
import pytest
import torch

from schemas.records import episodes_to_table
from schemas.tables import PILE_EPISODE_COLUMNS
from tests.training.fakes import expert_episode, tasks
from training.checkpoints import fetch, newest, version_of
from training.config import CTConfig, OptimConfig, RLConfig, SFTConfig
from training.ct import ct_job
from training.data import encode_all, episode_examples
from training.rewards import verifier_reward
from training.rl import build_sequences, ppo_losses, rl_job, shaped_rewards
from training.rollout import run_episodes
from training.sft import sft_job, train_sft


def _pile(lake, table: str, n: int, seed: int = 0, eps: list | None = None) -> None:
    eps = eps or [expert_episode(seed * 1000 + s, 1 + s % 2) for s in range(n)]
    full = episodes_to_table(eps)
    lake.append("episodes", full)  # the piles are thin rows: the episodes themselves live in `episodes`
    t = full.select(list(PILE_EPISODE_COLUMNS)).append_column("round_routed", pa.array([0] * n, pa.int32()))
    if table == "ct":
        t = t.append_column("reasons", pa.array([["env_failed"]] * n, pa.list_(pa.string())))
    lake.append(table, t)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_sft_then_ct_then_sft_chain_through_the_object_store(lake, tiny_policy) -> None:
    _pile(lake, "sft", 40)
    _pile(lake, "ct", 20, seed=1)
    w0 = _weights(tiny_policy.model)
    sft_v = lake.version("sft")
    res, pol = sft_job(
        lake, 1, tiny_policy, SFTConfig(steps=30, batch_size=16, optim=OptimConfig(lr=3e-3, warmup_steps=3))
    )
    assert _mean(res.losses[-5:]) < _mean(res.losses[:5]) - 0.5
    assert not torch.equal(w0, _weights(pol.model))
    assert res.pile_version == sft_v and res.base_checkpoint is None and res.output_checkpoint.endswith(".tar")
    assert pol.version == version_of(res.output_checkpoint)

    # CT starts from SFT's checkpoint, loaded back from the object store by URI
    w1 = _weights(fetch(lake, res.output_checkpoint).model)
    assert torch.equal(w1, _weights(pol.model))
    ct_res, ct_pol = ct_job(
        lake, 2, res.output_checkpoint, CTConfig(steps=20, batch_size=8, optim=OptimConfig(lr=1e-3, warmup_steps=2))
    )
    assert ct_res.base_checkpoint == res.output_checkpoint
    assert _mean(ct_res.losses[-5:]) < _mean(ct_res.losses[:5])
    assert not torch.equal(w1, _weights(ct_pol.model))
    assert newest(lake) == ct_res.output_checkpoint

    rows = {r["stage"]: r for r in lake.read("training_runs").to_pylist()}
    assert set(rows) == {"sft", "ct"}
    assert rows["ct"]["base_checkpoint"] == rows["sft"]["output_checkpoint"]
    assert rows["sft"]["pile_version"] == sft_v and rows["sft"]["tokens"] > 0 and rows["sft"]["samples"] > 0
    assert rows["sft"]["steps"] == 30 and len(rows["sft"]["losses"]) == 30 and rows["sft"]["wall_s"] > 0
    assert json.loads(rows["sft"]["config"])["sft"]["steps"] == 30


def test_sft_reads_the_pile_at_a_recorded_version(lake, tiny_policy) -> None:
    _pile(lake, "sft", 10)
    v = lake.version("sft")
    _pile(lake, "sft", 30, seed=5)  # the pile grows after the version was recorded
    res, _ = sft_job(lake, 1, tiny_policy, SFTConfig(steps=2, batch_size=4), pile_version=v)
    assert res.pile_version == v and res.metrics["episodes"] == 10


@pytest.fixture
def warm_policy(tiny_policy):
    """The tiny policy after a short SFT on expert clicks, so its attempts are readable and sometimes succeed."""
    items = encode_all(
        tiny_policy.tokenizer, [x for s in range(200) for x in episode_examples(expert_episode(10_000 + s).to_row())]
    )
    train_sft(tiny_policy, items, SFTConfig(steps=60, batch_size=32, optim=OptimConfig(lr=5e-3, warmup_steps=5)))
    return tiny_policy


@pytest.mark.slow
def test_ppo_update_lowers_its_loss_and_records_a_run(lake, warm_policy) -> None:
    cfg = RLConfig(algo="ppo", iterations=1, tasks_per_iter=12, group_size=4, ppo_epochs=3, minibatch_size=64,
                   value_pretrain_steps=15, curriculum=False, all_equal="keep", negative_weight=1.0,
                   optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    pol = warm_policy
    trajs = run_episodes(
        pol.model, pol.tokenizer, tasks(12, 3), attempts=4, temperature=1.0, policy_version=pol.version
    )
    rewards = shaped_rewards(trajs, verifier_reward(), cfg)
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    assert all((r == 1.0) == t.passed for r, t in zip(rewards, trajs) if t.termination != "unreadable_action")
    seqs, info = build_sequences(pol, trajs, rewards, cfg)
    assert 0.0 <= info["lambda_policy_mean"] < 1.0
    # stored log-probabilities are the policy's own: the ratio starts at 1
    with torch.no_grad():
        _, st = ppo_losses(pol, seqs, cfg)
    assert abs(st["kl"]) < 1e-3 and st["clip_frac"] == 0.0

    before, _ = ppo_losses(pol, seqs, cfg)
    w0 = _weights(pol.model)
    res, out = rl_job(lake, 1, pol, lambda n, seed: tasks(n, 3), verifier_reward(), cfg)
    assert not torch.equal(w0, _weights(out.model))
    it = res.metrics["iterations"][0]
    assert it["value_pretrain_loss"][1] < it["value_pretrain_loss"][0]  # the critic fits before the policy moves
    with torch.no_grad():
        after, _ = ppo_losses(out, seqs, cfg)
    assert float(after) < float(before)  # the clipped surrogate (+ value loss) on the batch went down
    row = lake.read("training_runs").to_pylist()[0]
    assert row["stage"] == "rl" and row["samples"] == 48 and row["output_checkpoint"] == res.output_checkpoint
    loaded = fetch(lake, res.output_checkpoint)
    assert torch.equal(_weights(loaded.value_head), _weights(out.value_head))  # the critic travels with the checkpoint


def test_grpo_advantages_are_group_normalised(warm_policy) -> None:
    cfg = RLConfig(algo="grpo")
    pol = warm_policy
    trajs = run_episodes(pol.model, pol.tokenizer, tasks(6, 4), attempts=4, temperature=1.0)
    rewards = [float(random.Random(i).random() < 0.5) for i in range(len(trajs))]
    seqs, _ = build_sequences(pol, trajs, rewards, cfg)
    assert all(torch.all(s.adv == s.adv[0]) for s in seqs)  # one advantage per trajectory, on all its tokens
    assert len(seqs) == sum(len(t.steps) for t in trajs)


def test_sft_sized_in_epochs_takes_passes_over_the_pile_not_a_fixed_count(lake, tiny_policy) -> None:
    cfg = SFTConfig(steps=999, batch_size=4, epochs=2.0, max_steps=50)
    assert cfg.steps_for(10) == 5 and cfg.steps_for(11) == 6 and cfg.steps_for(1000) == 50 and cfg.steps_for(0) == 1
    assert SFTConfig(steps=7).steps_for(1000) == 7  # no epochs: the fixed count
    _pile(lake, "sft", 6)
    res, _ = sft_job(lake, 1, tiny_policy, cfg)
    assert res.steps == cfg.steps_for(res.samples) == len(res.losses)


def test_sft_grounding_rehearsal_adds_click_examples_on_the_piles_own_screens(lake, tiny_policy) -> None:
    from sandbox.demonstrators import Expert
    from sandbox.heldout import training_tasks
    from sandbox.rollout import run_attempt, to_episode
    from training.base import grounding_examples
    from training.data import pile_screens, read_pile
    from training.prompt import SCREEN_LINE, PromptConfig

    assert grounding_examples([("no element lines here", [])], 5, PromptConfig()) == []  # never loops forever
    _pile(
        lake,
        "sft",
        6,
        eps=[to_episode(run_attempt(t, Expert(0)), "rollout", "test") for t in training_tasks(6, seed=2)],
    )
    plain, _ = sft_job(lake, 1, tiny_policy, SFTConfig(steps=2, batch_size=4))
    res, _ = sft_job(lake, 1, tiny_policy, SFTConfig(steps=2, batch_size=4, grounding=1.0))
    assert res.metrics["grounding_examples"] == plain.samples and res.samples == 2 * plain.samples
    screens = pile_screens(read_pile(lake, "sft").rows)
    assert screens and all(obs for obs, _ in screens)
    for prompt, answer in grounding_examples(screens, 20, PromptConfig(thought_style="line"), seed=1):
        name = prompt.splitlines()[0].split('"')[1]  # Instruction: Click the <role> "<name>".
        thought, action = answer.removeprefix("Thought: ").split("\nAction: ")
        m = SCREEN_LINE.match(thought)  # the thought is that element's line on this very screen
        assert m and m["name"] == name and thought in prompt.split("Observation:\n", 1)[1].splitlines()
        assert action == f"click(point='<point>{m['x']} {m['y']}</point>')"


def test_rl_rehearses_the_sft_pile_and_records_its_version(lake, warm_policy) -> None:
    _pile(lake, "sft", 10)
    cfg = RLConfig(iterations=1, tasks_per_iter=3, group_size=4, minibatch_size=16, rehearsal_coef=1.0)
    res, _ = rl_job(lake, 1, warm_policy, lambda n, seed: tasks(n, 5), verifier_reward(), cfg)
    assert res.pile_version == lake.version("sft") and res.metrics["rehearsal_examples"] >= 10
    its = [it for it in res.metrics["iterations"] if it["updates"]]
    assert all(it["rehearsal_nll"] > 0 for it in its)
    off, _ = rl_job(
        lake, 2, warm_policy, lambda n, seed: tasks(n, 5), verifier_reward(), replace(cfg, rehearsal_coef=0.0)
    )
    assert off.pile_version is None and off.metrics["rehearsal_examples"] == 0
