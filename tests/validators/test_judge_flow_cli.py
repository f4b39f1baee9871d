"""The LLM-judge validator with a real (tiny, randomly initialised) local model; the OpenAI-compatible backend
against a real HTTP server; the Prefect flow; the CLI."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from typer.testing import CliRunner

from ingest.land import land
from schemas.records import episodes_to_table
from tests.validators.factory import make_episode, store_png
from validators.base import EpisodeBatch
from validators.judge import Judge, LocalJudge, OpenAIJudge, build_prompts


@pytest.fixture(scope="module")
def tiny_judge_dir(tmp_path_factory):
    """A real causal LM folder: LlamaForCausalLM from a small config (random weights) + a word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = [
        "<unk>",
        "<s>",
        "yes",
        "no",
        "task",
        "step",
        "thought",
        "action",
        "answer",
        "did",
        "the",
        "agent",
        "complete",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512)  # fmt: skip
    d = tmp_path_factory.mktemp("judge")
    LlamaForCausalLM(cfg).save_pretrained(d)
    hf_tok.save_pretrained(d)
    return str(d)


def test_local_judge_threshold_pass_and_fail(tiny_judge_dir, tmp_path):
    shot = store_png(tmp_path)
    ep = make_episode(shot)
    backend = LocalJudge(tiny_judge_dir)
    p = backend.score(build_prompts(EpisodeBatch(episodes_to_table([ep]))), [[]])[0]
    assert 0.0 < p < 1.0
    ok = Judge(model=tiny_judge_dir, threshold=p - 1e-3).check(ep)
    bad = Judge(model=tiny_judge_dir, threshold=p + 1e-3).check(ep)
    assert ok.passed and abs(ok.score - p) < 1e-6
    assert not bad.passed and bad.reason == "judge_rejected"
    assert Judge(model=tiny_judge_dir).version != Judge(model=tiny_judge_dir + "x").version


def test_prompt_has_history_and_last_five_screenshots(tmp_path):
    shots = [store_png(tmp_path, seed=i) for i in range(7)]
    ep = make_episode(shots[0], n_steps=7)
    from dataclasses import replace

    ep = replace(ep, steps=tuple(replace(s, screenshot_uri=shots[i][0]) for i, s in enumerate(ep.steps)), episode_id="")
    prompt = build_prompts(EpisodeBatch(episodes_to_table([ep])))[0]
    assert prompt.screenshot_uris == tuple(u for u, _ in shots[2:])
    assert "Task: Save the document number 0" in prompt.text and "Action: finished(content='done')" in prompt.text


class _Handler(BaseHTTPRequestHandler):
    answer = "yes"
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append(body)
        p_yes = 0.8 if self.answer == "yes" else 0.1
        out = {"choices": [{"message": {"content": self.answer}, "logprobs": {"content": [{"token": self.answer, "top_logprobs": [
            {"token": "yes", "logprob": __import__("math").log(p_yes)}, {"token": "no", "logprob": __import__("math").log(1 - p_yes)}]}]}}]}  # fmt: skip
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def test_openai_compatible_judge_over_http(tmp_path):
    srv = HTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        shot = store_png(tmp_path)
        ep = make_episode(shot, n_steps=6)
        url = f"http://127.0.0.1:{srv.server_port}/v1"
        v = Judge(model=url, endpoint_model="judge-1", threshold=0.5)
        assert v.check(ep).passed and abs(v.check(ep).score - 0.8) < 1e-6
        body = _Handler.seen[-1]
        assert body["model"] == "judge-1"
        images = [p for p in body["messages"][0]["content"] if p["type"] == "image_url"]
        assert len(images) == 5 and images[0]["image_url"]["url"].startswith("data:image/png;base64,")
        _Handler.answer = "no"
        r = v.check(ep)
        assert not r.passed and r.reason == "judge_rejected"
    finally:
        srv.shutdown()
    assert OpenAIJudge.parse({"choices": [{"message": {"content": "Yes."}}]}) == 1.0


def test_flow_routes_a_round(prefect_harness, lake):
    from flows.validate_and_route import validate_and_route

    shot = store_png(lake)
    land(lake, [make_episode(shot, i=i) for i in range(3)] + [make_episode(shot, i=9, env_passed=False)])
    out = validate_and_route(1, str(lake.uri))
    assert (out["n_new"], out["n_pass"], out["n_fail"]) == (4, 3, 1)
    assert lake.count("sft") == 3 and lake.count("ct") == 1


def test_cli_route_and_simulate(lake):
    from flywheel.cli import app

    shot = store_png(lake)
    land(lake, [make_episode(shot, i=i) for i in range(2)])
    r = CliRunner().invoke(app, ["route", "--round", "1", "--lake", str(lake.uri)])
    assert r.exit_code == 0, r.output
    assert "pass rate" in r.output and lake.count("sft") == 2
    r = CliRunner().invoke(
        app, ["simulate", "--rounds", "2", "--attempts", "300", "--pass-shares", "0.3,0.6", "--format", "csv"]
    )
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[0].startswith("round,attempts,true_pass_share") and len(lines) == 3
    r = CliRunner().invoke(app, ["simulate", "--rounds", "2", "--pass-shares", "0.3"])
    assert r.exit_code != 0


@pytest.mark.parametrize("rounds", [1, 2, 6])
def test_simulate_default_shares_follow_rounds(rounds):
    """Without --pass-shares any --rounds runs (the default curve has four points)."""
    from flywheel.cli import app

    r = CliRunner().invoke(app, ["simulate", "--rounds", str(rounds), "--attempts", "60", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    shares = [row["true_pass_share"] for row in rows]
    assert len(rows) == rounds and shares == sorted(shares) and shares[0] == 0.3
    assert shares[-1] == (0.3 if rounds == 1 else 0.7)
