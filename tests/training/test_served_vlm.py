"""A VLM acting through `flywheel policy serve`'s chat endpoint (the real server in a subprocess, over HTTP, the
screenshots sent as PNG data URLs) gives what the in-process VLM gives, and RL's rollouts can go through it."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import replace

import httpx
import pytest
import torch

from tests.training.test_served_policy import Server
from tests.training.test_vlm import _sandbox_prompts, _weights, teacher_forced
from training.config import OptimConfig, RLConfig, VLMConfig


@pytest.fixture(scope="module")
def vlm_served_dir(tmp_path_factory):
    """A tiny VLM after a few SFT steps on the sandbox expert's steps over its own screenshots, so its greedy
    choices are not the near-ties of an untrained model."""
    from training.base import sandbox_texts
    from training.config import SFTConfig
    from training.envs import SandboxBackend
    from training.model import Policy
    from training.sft import train_sft
    from training.vision import vision_examples

    policy = Policy.create(sandbox_texts(60), VLMConfig())
    backend = SandboxBackend()
    shots: dict[str, bytes] = {}
    rows = []
    for i, att in enumerate(backend.demonstrate(backend.demo_tasks(8, 1), "expert")):
        steps = []
        for k, s in enumerate(att.steps):
            shots[f"{i}/{k}"] = s.screenshot
            steps.append({"thought": s.thought, "action": s.action, "screenshot_uri": f"{i}/{k}"})
        rows.append({"instruction": att.task.instruction, "steps": steps})
    items, _ = vision_examples(policy.tokenizer, policy.model.vision, rows, shots.__getitem__)
    train_sft(policy, items, SFTConfig(steps=12, batch_size=8, optim=OptimConfig(lr=3e-3, warmup_steps=2)))
    d = tmp_path_factory.mktemp("vlm-served") / "ckpt-vlm"
    policy.save(d)
    return d


@pytest.fixture(scope="module")
def vlm_server(vlm_served_dir):
    s = Server(str(vlm_served_dir))
    yield s
    s.stop()


@pytest.mark.slow
def test_greedy_vlm_episodes_through_the_chat_endpoint_equal_the_in_process_ones(vlm_served_dir, vlm_server) -> None:
    """Each prompt goes alone to the server (a chat request is one conversation); in process the same prompts run
    one at a time too, so both compute the same thing and the tokens and log-probabilities are equal. The scripted
    annotator overrides unreadable proposals, so attempts run several steps over changing screenshots."""
    from training.envs import env_backend
    from training.model import Policy
    from training.rollout import run_episodes
    from training.served import served

    env = env_backend("sandbox")
    tasks = [t for t in env.heldout_tasks(1) if t.level == 2]  # one per family: a few steps each
    local = Policy.load(vlm_served_dir)
    remote = served(vlm_server.url, local)
    assert remote.kind == "vlm" and remote.model.vision == local.model.vision
    kw = dict(temperature=0.0, max_new_tokens=16, reviewer=env.reviewer, batch_size=1)
    a = run_episodes(local.model, local.tokenizer, tasks, **kw)
    b = run_episodes(remote.model, local.tokenizer, tasks, **kw)
    assert sum(len(t.steps) for t in a) >= 2 * len(tasks), [len(t.steps) for t in a]
    for ta, tb in zip(a, b, strict=True):
        assert [s.text for s in ta.steps] == [s.text for s in tb.steps]
        assert [s.response_ids for s in ta.steps] == [s.response_ids for s in tb.steps]
        assert [s.image for s in ta.steps] == [s.image for s in tb.steps] and ta.steps[0].image
        for sa, sb in zip(ta.steps, tb.steps, strict=True):
            assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-4)
    # batched in process (left-padded into one generate), the greedy tokens are the same as well
    c = run_episodes(local.model, local.tokenizer, tasks, **(kw | {"batch_size": 256}))
    assert [[s.response_ids for s in t.steps] for t in c] == [[s.response_ids for s in t.steps] for t in a]


def test_served_vlm_samples_are_seeded_and_carry_the_behaviour_log_probabilities(vlm_served_dir, vlm_server) -> None:
    from training.generate import sample
    from training.model import Policy
    from training.served import served

    local = Policy.load(vlm_served_dir)
    remote = served(vlm_server.url, local)
    prompts = _sandbox_prompts(local, 3)
    s1 = sample(remote.model, local.tokenizer, prompts, 12, 1.0, torch.Generator().manual_seed(5))
    s2 = sample(remote.model, local.tokenizer, prompts, 12, 1.0, torch.Generator().manual_seed(5))
    assert [s.token_ids for s in s1] == [s.token_ids for s in s2]
    lp, _ = teacher_forced(local, prompts, s1)
    assert lp.tolist() == pytest.approx([x for s in s1 for x in s.logprobs], abs=1e-4)


def test_the_chat_endpoint_refuses_what_it_cannot_serve_in_one_line(vlm_served_dir, vlm_server) -> None:
    from training.model import Policy
    from training.vision import IMAGE_PAD, chat_content

    p = _sandbox_prompts(Policy.load(vlm_served_dir), 1)[0]
    parts = chat_content(p)
    url = f"{vlm_server.url}/v1/chat/completions"

    def ask(content, **kw) -> httpx.Response:
        return httpx.post(url, json={"model": "ckpt-vlm", "messages": [{"role": "user", "content": content}], **kw},
                          timeout=60)  # fmt: skip

    ok = ask(parts, max_tokens=4, temperature=0.0, logprobs=True, top_logprobs=0)
    assert ok.status_code == 200
    got = ok.json()["choices"][0]
    assert len(got["logprobs"]["content"]) >= 1 and got["message"]["role"] == "assistant"
    image = next(x for x in parts if x["type"] == "image_url")
    for content, why in [
        ([parts[0]], "one screenshot per request, not 0"),
        (parts + [image], "one screenshot per request, not 2"),
        ([{"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}], "base64 data URLs"),
        (
            [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"no").decode()}}],
            "not a readable image",
        ),
        ([{"type": "text", "text": IMAGE_PAD}, image], "only image_url parts may"),
        ([{"type": "audio", "audio": {}}], "unsupported content part type 'audio'"),
    ]:
        r = ask(content)
        assert r.status_code == 400 and why in r.json()["detail"] and "\n" not in r.json()["detail"]
    r = httpx.post(f"{vlm_server.url}/v1/completions", json={"model": "ckpt-vlm", "prompt": [1, 2]})
    assert r.status_code == 400 and "send its screenshots to /v1/chat/completions" in r.json()["detail"]
    assert ask(parts, top_logprobs=3).status_code == 422  # alternatives are not offered


@pytest.mark.slow
def test_vlm_rl_rolls_out_through_the_server_on_sandbox_screenshots(vlm_served_dir, tmp_path) -> None:
    """The VLM's RL job with every rollout generated by the server (chat requests with screenshots), the learner
    publishing each version for it to load."""
    from storage.lake import Lake
    from training.checkpoints import fetch, publish, version_of
    from training.envs import training_tasks
    from training.model import Policy
    from training.rewards import verifier_reward
    from training.rl import rl_job
    from training.rollout_server import RolloutServer

    lake = Lake.open(tmp_path / "lake", create=True)
    uri = publish(lake, Policy.load(vlm_served_dir), {"stage": "test"})
    server = Server(uri, "--lake", str(lake.uri))
    cfg = RLConfig(algo="ppo", iterations=2, tasks_per_iter=2, group_size=2, value_pretrain_steps=1, minibatch_size=8,
                   curriculum=False, all_equal="keep", negative_weight=1.0, rehearsal_coef=0.0,
                   optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    try:
        res, out = rl_job(lake, 1, uri, lambda n, s: training_tasks(n, s), verifier_reward(), cfg, max_new_tokens=16,
                          rollouts=RolloutServer(server.url))  # fmt: skip
    finally:
        server.stop()
    its, ckpts = res.metrics["iterations"], res.metrics["rollout_checkpoints"]
    assert [it["policy_version"] for it in its] == [version_of(c) for c in ckpts] and len(set(ckpts)) == 2
    assert all(it["episodes"] == 4 and it["updates"] >= 1 for it in its)
    assert fetch(lake, ckpts[1]).kind == "vlm"
    assert not torch.equal(_weights(out.model), _weights(fetch(lake, uri).model))
    row = next(r for r in lake.read("training_runs").to_pylist() if r["run_id"] == res.run_id)
    assert json.loads(row["config"])["vision"]["coords"] == "image"
    shutil.rmtree(tmp_path / "lake")


@pytest.mark.slow
def test_a_vlm_round_acts_and_practises_through_the_server(vlm_served_dir, tmp_path) -> None:
    """Rounds start from a VLM folder (`model.pretrained`): round 0 in process (cold SFT on the landed screenshots),
    then round 1 with sample, annotate, evaluate and RL's rollouts all through `flywheel policy serve --lake`."""
    from flows.config import load_round_config
    from flows.stages import RoundContext, due_stages, run_stage
    from storage.lake import Lake
    from tests.rounds.helpers import write_config, write_landing
    from training.checkpoints import fetch, version_of
    from validators.rounds import read_round

    fp32 = {"bf16": False}
    cfg = load_round_config(write_config(
        tmp_path / "round.json", {"annotate_tasks": 2, "eval_per_cell": 1},
        model={"pretrained": str(vlm_served_dir)}, sampling={"tasks": 3, "attempts": 2, "max_new_tokens": 16},
        cold_sft={"steps": 4, "batch_size": 8, "optim": fp32}, sft={"steps": 2, "batch_size": 8, "optim": fp32},
        eval={"max_new_tokens": 16}, max_new_tokens=16))  # fmt: skip
    lake = Lake.open(tmp_path / "lake", create=True)
    landing = write_landing(lake, tmp_path / "landing", n_expert=8, n_novice=1, n_inter=1)
    for st in due_stages(0, cfg):
        run_stage(RoundContext(lake, 0, landing, cfg), st)
    assert fetch(lake, read_round(lake, 0).stages["sft"]["checkpoint"]).kind == "vlm"
    server = Server("--lake", str(lake.uri))
    try:
        c = replace(cfg, policy_url=server.url, rl_through_server=True)
        stages = due_stages(1, c)
        assert {"sample", "annotate", "rl", "evaluate"} <= set(stages)
        for st in stages:
            run_stage(RoundContext(lake, 1, landing, c), st)
    finally:
        server.stop()
    rec = read_round(lake, 1)
    assert rec.n_new > 0 and rec.breakdown["annotation"]["steps"] > 0
    assert rec.eval_pass_rate is not None
    row = next(r for r in lake.read("training_runs").to_pylist() if r["run_id"] == rec.stages["rl"]["run_id"])
    metrics = json.loads(row["metrics"])
    assert [it["policy_version"] for it in metrics["iterations"]] == [
        version_of(u) for u in metrics["rollout_checkpoints"]
    ]
    shots = lake.duckdb().sql("SELECT count(*) FROM steps WHERE round = 1 AND screenshot_uri IS NOT NULL").fetchone()[0]
    assert shots > 0  # the sampled and annotated episodes landed with their screenshots
