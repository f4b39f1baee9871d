"""RL whose rollouts go through `flywheel policy serve --lake` (the real server in a subprocess, over HTTP) while
the learner trains in this process: each policy version is published, loaded by the server and recorded on the
trajectories it wrote, so the staleness check applies; the round's RL stage does it when configured."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from tests.training.fakes import tasks
from tests.training.test_served_policy import Server
from training.config import OptimConfig, RLConfig

#: PPO with a critic: its advantages are not all zero even when every attempt of the untrained policy fails alike.
PPO = RLConfig(algo="ppo", iterations=2, tasks_per_iter=4, group_size=2, value_pretrain_steps=1, minibatch_size=8,
               curriculum=False, all_equal="keep", negative_weight=1.0, rehearsal_coef=0.0,
               optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


@pytest.fixture
def published(lake, tiny_policy):
    """The tiny policy as a checkpoint of the lake, and a server started on that lake serving it."""
    from training.checkpoints import publish

    uri = publish(lake, tiny_policy, {"stage": "test"})
    server = Server(uri, "--lake", str(lake.uri))
    yield uri, server
    server.stop()


@pytest.mark.slow
def test_rl_rolls_out_through_the_server_and_records_each_policy_version(lake, published) -> None:
    from training.checkpoints import fetch, version_of
    from training.rewards import verifier_reward
    from training.rl import rl_job
    from training.rollout_server import RolloutServer

    uri, server = published
    base = fetch(lake, uri)
    w0 = _weights(base.model)
    res, out = rl_job(lake, 1, uri, lambda n, s: tasks(n, 7), verifier_reward(), PPO, max_new_tokens=16,
                      rollouts=RolloutServer(server.url))  # fmt: skip
    ckpts = res.metrics["rollout_checkpoints"]
    its = res.metrics["iterations"]
    assert len(ckpts) == len(its) == 2 and len(set(ckpts)) == 2  # a new version every iteration (sync_every 1)
    assert [it["policy_version"] for it in its] == [version_of(c) for c in ckpts]
    assert [it["policy_step"] for it in its] == [0, 1] and all(it["age_max"] == 0 for it in its)
    assert all(it["episodes"] == 8 and it["updates"] >= 1 for it in its)
    assert torch.equal(_weights(fetch(lake, ckpts[0]).model), w0)  # version 0 is the base's weights
    assert not torch.equal(_weights(fetch(lake, ckpts[1]).model), w0)  # version 1 is after one update
    assert not torch.equal(_weights(out.model), _weights(fetch(lake, ckpts[1]).model))  # and the job went on
    served = httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"]
    assert served == version_of(ckpts[1])  # the server loaded the learner's last version
    row = next(r for r in lake.read("training_runs").to_pylist() if r["run_id"] == res.run_id)
    assert json.loads(row["config"])["rollouts"] == {"url": server.url, "sync_every": 1}


@pytest.mark.slow
def test_a_server_behind_the_learner_writes_episodes_the_staleness_check_drops(lake, published) -> None:
    """sync_every = 2: iteration 1 acts with version 0's weights, one update old; with max_lag = 0 its episodes are
    dropped (and counted), with max_lag = 1 they are kept."""
    from dataclasses import replace

    from training.rewards import verifier_reward
    from training.rl import rl_job
    from training.rollout_server import RolloutServer

    uri, server = published
    for lag, dropped in ((0, 8), (1, 0)):
        res, _ = rl_job(lake, 1, uri, lambda n, s: tasks(n, 7), verifier_reward(), replace(PPO, max_lag=lag),
                        max_new_tokens=16, rollouts=RolloutServer(server.url, sync_every=2))  # fmt: skip
        its = res.metrics["iterations"]
        assert len(res.metrics["rollout_checkpoints"]) == 1
        assert its[0]["policy_version"] == its[1]["policy_version"] and its[1]["policy_step"] == 0
        assert its[1]["age_max"] == 1 and its[1]["stale_dropped"] == dropped
        assert its[1]["updates"] == (0 if dropped else its[0]["updates"])


@pytest.mark.slow
def test_the_rl_stage_of_a_round_rolls_out_through_policy_url(tmp_path, tiny_policy) -> None:
    """`rl_through_server` in the round config: the RL stage publishes its versions to the lake the server loads
    them from (round 1's RL, after an SFT stage recorded as done)."""
    from flows.config import load_round_config
    from flows.stages import RoundContext, mark, run_stage
    from storage.lake import Lake
    from tests.rounds.helpers import write_config
    from training.checkpoints import publish, version_of

    lake = Lake.open(tmp_path / "lake", create=True)
    uri = publish(lake, tiny_policy, {"stage": "sft"})
    mark(lake, 1, "sft", "done", checkpoint=uri)
    server = Server(uri, "--lake", str(lake.uri))
    try:
        cfg = load_round_config(write_config(tmp_path / "round.json", {"policy_url": server.url,
                                                                       "rl_through_server": True}))  # fmt: skip
        info = run_stage(RoundContext(lake, 1, tmp_path / "landing", cfg), "rl")
    finally:
        server.stop()
    row = next(r for r in lake.read("training_runs").to_pylist() if r["run_id"] == info["run_id"])
    metrics, config = json.loads(row["metrics"]), json.loads(row["config"])
    assert row["base_checkpoint"] == uri and config["rollouts"]["url"] == server.url
    assert [it["policy_version"] for it in metrics["iterations"]] == [
        version_of(c) for c in metrics["rollout_checkpoints"]
    ]


def test_rl_through_a_server_needs_its_url_and_episode_groups_acted_there(tiny_policy) -> None:
    from flows.config import RoundConfig
    from training.rewards import verifier_reward
    from training.rl import train_rl
    from training.rollout_server import RolloutServer, ServedActor

    with pytest.raises(ValueError, match="rl_through_server needs policy_url"):
        RoundConfig(rl_through_server=True)
    with pytest.raises(ValueError, match="sync_every must be at least 1"):
        RolloutServer("http://127.0.0.1:1", sync_every=0)
    actor = ServedActor(None, RolloutServer("http://127.0.0.1:1"))  # refused before it is ever asked
    for cfg in (RLConfig(workers=1), RLConfig(groups="step")):
        with pytest.raises(ValueError, match="use groups='episode' and workers=0"):
            train_rl(tiny_policy, lambda n, s: tasks(n, s), verifier_reward(), cfg, actor=actor)
