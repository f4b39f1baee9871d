"""Rollouts beside learning (training/workers.py): a worker acts with a copy of the weights of the step a batch was
submitted at, however the learner has moved since; RL with a worker process (and on a Dask cluster) overlaps acting
with learning and records every batch's age."""

from __future__ import annotations

import os

import pytest
import torch

from training.base import BASE_MODEL
from training.config import OptimConfig, RLConfig
from training.data import next_token_logprobs
from training.envs import training_tasks
from training.model import Policy
from training.workers import Rollouts, local_executor


def _reward(trajs) -> list[float]:
    return [1.0 if t.passed else 0.0 for t in trajs]


def _logprobs(policy: Policy, prompt: list[int], response: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        return next_token_logprobs(policy.model, ids, torch.ones_like(ids))[0, len(prompt) - 1 :]


def test_a_worker_acts_with_the_weights_of_the_step_it_was_submitted_at() -> None:
    pol = Policy.load(BASE_MODEL)
    before = Policy.load(BASE_MODEL)
    tasks = training_tasks(4, 11, levels=[1])
    ex = local_executor(1)
    try:
        src = Rollouts(pol, "episode", {"attempts": 2, "temperature": 1.0, "max_new_tokens": 40}, ex, depth=2)
        src.submit(tasks, 0, seed=5)
        with torch.no_grad():  # the learner moves on before the worker has even started
            for p in pol.model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        got = src.take(1)
    finally:
        ex.shutdown()
    assert got.version == 0 and len(got.trajectories) == 8
    assert all(tr.task is tasks[i // 2] for i, tr in enumerate(got.trajectories))  # the learner's own TaskInfos
    step = got.trajectories[0].steps[0]
    lp = torch.tensor(step.logprobs)
    assert torch.allclose(_logprobs(before, step.prompt_ids, step.response_ids), lp, atol=1e-4)
    assert not torch.allclose(_logprobs(pol, step.prompt_ids, step.response_ids), lp, atol=1e-3)


def _rl(address: str | None = None, rehearsal: list | None = None) -> tuple[dict, Policy, dict]:
    from training.rl import train_rl

    pol = Policy.load(BASE_MODEL)
    start = {k: v.clone() for k, v in pol.model.state_dict().items()}
    cfg = RLConfig(iterations=4, tasks_per_iter=8, group_size=4, curriculum=False, all_equal="keep", workers=1,
                   worker_address=address, max_lag=2, rehearsal_coef=1.0 if rehearsal else 0.0,
                   optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    _, info = train_rl(pol, lambda n, seed: training_tasks(n, 500 + seed, levels=[1, 2]), _reward, cfg,
                       max_new_tokens=40, rehearsal=rehearsal)  # fmt: skip
    return info, pol, start


def _copying_items(n: int = 16) -> list:
    """The expert's steps on a few sandbox tasks, encoded: the copying data a rehearsal step trains on."""
    from sandbox.demonstrators import Expert
    from sandbox.heldout import training_tasks as sandbox_tasks
    from sandbox.parallel import run_many
    from sandbox.rollout import to_episode
    from training.data import encode_all, episode_examples

    eps = [to_episode(a, "rollout", f"s{i}") for i, a in enumerate(run_many(sandbox_tasks(4, seed=3), Expert))]
    tok = Policy.load(BASE_MODEL).tokenizer
    return encode_all(tok, [x for e in eps for x in episode_examples(e.to_row())])[:n]


def _check(info: dict, pol: Policy, start: dict) -> None:
    hist = info["iterations"]
    assert len(hist) == 4
    assert [h["age_max"] for h in hist] == [0, 1, 1, 1]  # one batch ahead: every batch after the first is a step old
    assert all(h["learner_wait_s"] >= 0 and h["gen_s"] > 0 for h in hist)
    assert any(not torch.equal(start[k], v) for k, v in pol.model.state_dict().items())


@pytest.mark.slow
def test_rl_with_a_worker_process_acts_a_batch_ahead_and_rehearses_while_it_waits() -> None:
    info, pol, start = _rl(rehearsal=_copying_items())
    _check(info, pol, start)
    # the learner's core never idles: while the first batch is acted it takes rehearsal steps on the copying data
    assert info["iterations"][0]["rehearsal_while_waiting"] > 0


@pytest.mark.slow
def test_rl_acts_on_a_dask_cluster() -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        info, pol, start = _rl(cluster.scheduler_address)
        with cluster.get_client() as client:
            pids = client.run(os.getpid)
    _check(info, pol, start)
    assert os.getpid() not in pids.values()
