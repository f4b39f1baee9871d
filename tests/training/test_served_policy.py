"""Acting through a served model: `flywheel policy serve` over real HTTP gives what the in-process policy gives.

The server is the real command in a subprocess on 127.0.0.1, spoken to with the same client a team would point at
its vLLM server (training/served.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import torch

from tests.helpers.s3 import free_port

FLYWHEEL = str(Path(sys.executable).with_name("flywheel"))


class Server:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([FLYWHEEL, "policy", "serve", *args, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"policy server exited: {self.proc.stdout.read()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("policy server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def served_dir(tmp_path):
    """The shipped base: it writes readable actions, so episodes run several steps."""
    from training.base import BASE_MODEL

    d = tmp_path / "ckpt-served"
    shutil.copytree(BASE_MODEL, d)
    return d


@pytest.fixture
def server(served_dir):
    s = Server(str(served_dir))
    yield s
    s.stop()


def test_served_greedy_episodes_equal_the_in_process_ones(served_dir, server) -> None:
    from training.envs import env_backend
    from training.model import Policy
    from training.rollout import run_episodes
    from training.served import served

    env = env_backend("sandbox")
    tasks = env.heldout_tasks(1)  # one held-out task per family and level
    local = Policy.load(served_dir)
    remote = served(server.url, local)
    # the scripted annotator overrides unreadable proposals, so every attempt runs several steps of proposals
    a = run_episodes(local.model, local.tokenizer, tasks, temperature=0.0, max_new_tokens=24, reviewer=env.reviewer)
    b = run_episodes(remote.model, local.tokenizer, tasks, temperature=0.0, max_new_tokens=24, reviewer=env.reviewer)
    assert sum(len(t.steps) for t in a) > 2 * len(tasks)
    assert [t.passed for t in a] == [t.passed for t in b]
    for ta, tb in zip(a, b, strict=True):
        assert [s.text for s in ta.steps] == [s.text for s in tb.steps]
        assert [s.response_ids for s in ta.steps] == [s.response_ids for s in tb.steps]
        for sa, sb in zip(ta.steps, tb.steps, strict=True):
            # the same tokens; their log-probabilities agree to float32 rounding in another process (1.3e-5 seen)
            assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-4)


def test_served_samples_are_seeded_and_carry_the_behaviour_policys_logprobs(served_dir, server) -> None:
    """RL needs each sampled token's log-probability under the policy that sampled it: the server's must equal the
    weights' own, teacher-forced here."""
    from training.data import next_token_logprobs
    from training.generate import sample
    from training.model import Policy
    from training.served import served

    local = Policy.load(served_dir)
    remote = served(server.url, local)
    prompts = [local.tokenizer.encode('Instruction: Click OK\nObservation:\nbutton "OK" (3,4)\n')] * 3
    s1 = sample(remote.model, local.tokenizer, prompts, 16, 1.0, torch.Generator().manual_seed(5))
    s2 = sample(remote.model, local.tokenizer, prompts, 16, 1.0, torch.Generator().manual_seed(5))
    assert [s.token_ids for s in s1] == [s.token_ids for s in s2]  # the same seed asks for the same samples
    assert len({tuple(s.token_ids) for s in s1}) > 1  # temperature 1 over 3 copies: not all the same
    for p, s in zip(prompts, s1, strict=True):
        ids = torch.tensor([p + s.token_ids])
        lp = next_token_logprobs(local.model, ids, torch.ones_like(ids))[0, len(p) - 1 :]
        assert lp.tolist() == pytest.approx(s.logprobs, abs=1e-4)


def test_a_server_serving_another_model_is_refused_in_one_line(served_dir, server, tiny_policy) -> None:
    from training.served import ServedModelError, served

    other = replace(tiny_policy, version="ckpt-somethingelse")
    with pytest.raises(ServedModelError, match="serves ckpt-served, not ckpt-somethingelse") as e:
        served(server.url, other)
    assert "\n" not in str(e.value)
    with pytest.raises(ServedModelError, match="started on a model folder, not a lake") as e:
        served(server.url, other, "objects/x.tar", "/nowhere")  # asked to load: a folder server cannot
    assert "\n" not in str(e.value)
    r = httpx.post(f"{server.url}/v1/completions", json={"model": "nope", "prompt": [1, 2]})
    assert r.status_code == 404


@pytest.mark.slow
def test_a_round_acting_through_the_server_equals_the_in_process_round(tmp_path) -> None:
    """Round 0 in-process, then round 1 twice from copies of that lake: once in-process, once with sample, annotate
    and evaluate going through `flywheel policy serve --lake` (which loads each checkpoint a stage asks for). Sampling
    is greedy here so both rounds see the same episodes; held-out results and the piles must be identical."""
    from flows.config import load_round_config
    from flows.stages import RoundContext, due_stages, run_stage
    from storage.lake import Lake
    from tests.rounds.helpers import write_config, write_landing
    from validators.rounds import read_round

    cfg = load_round_config(write_config(tmp_path / "round.json", sampling={"tasks": 6, "attempts": 2,
                                                                           "max_new_tokens": 24, "temperature": 0.0}))  # fmt: skip
    lake0 = Lake.open(tmp_path / "lake0", create=True)
    landing0 = write_landing(lake0, tmp_path / "landing0", n_expert=16, n_novice=4, n_inter=2)
    for st in due_stages(0, cfg):
        run_stage(RoundContext(lake0, 0, landing0, cfg), st)
    results = {}
    for arm in ("local", "served"):
        shutil.copytree(tmp_path / "lake0", tmp_path / arm)
        shutil.copytree(landing0, tmp_path / f"landing-{arm}")
        lake = Lake.open(tmp_path / arm)
        server = Server("--lake", str(tmp_path / arm)) if arm == "served" else None
        try:
            c = replace(cfg, policy_url=server.url) if server else cfg
            for st in due_stages(1, c):
                run_stage(RoundContext(lake, 1, tmp_path / f"landing-{arm}", c), st)
        finally:
            if server:
                server.stop()
        rec = read_round(lake, 1)
        results[arm] = (
            rec.eval_pass_rate,
            rec.eval["by_cell"],
            rec.n_new,
            rec.n_pass,
            rec.sft_size,
            rec.breakdown["annotation"]["accepted"],
        )
    assert results["served"] == results["local"]


def test_chat_on_a_text_checkpoint_completes_the_messages_text(served_dir, server) -> None:
    """`/v1/chat/completions` serves a text checkpoint too: the prompt is the messages' text in order (the chat
    template of training/vision.py), so a chat request answers what a completions request with that text does."""
    prompt = 'Instruction: Click OK\nObservation:\nbutton "OK" (3,4)\n'
    kw = {"model": "ckpt-served", "max_tokens": 12, "temperature": 0.0}
    c = httpx.post(f"{server.url}/v1/completions", json=kw | {"prompt": prompt, "logprobs": 0}).json()["choices"][0]
    parts = [{"type": "text", "text": prompt[:20]}, {"type": "text", "text": prompt[20:]}]
    h = httpx.post(f"{server.url}/v1/chat/completions",
                   json=kw | {"messages": [{"role": "user", "content": parts}], "logprobs": True}).json()["choices"][0]  # fmt: skip
    assert h["message"]["content"] == c["text"] and h["finish_reason"] == c["finish_reason"]
    assert [t["logprob"] for t in h["logprobs"]["content"]] == c["logprobs"]["token_logprobs"]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=kw | {"messages": [{"role": "user", "content": [image]}]})
    assert r.status_code == 400 and "reads text only" in r.json()["detail"]
