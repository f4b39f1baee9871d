"""The multimodal policy: a tiny Qwen2-VL from a config trains through the same SFT and RL jobs on the sandbox's
screenshots, its coordinate convention maps actions both ways and is recorded, and its checkpoint round-trips.

On 2 cores it only has to train correctly (loss falls, weights change, the sampler's log-probabilities are the
learner's), not to learn the tasks."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from training.config import OptimConfig, RLConfig, SFTConfig
from training.vision import IMAGE, IMAGE_PAD, View, vision_prompt

SCREEN = (640, 400)


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    """A fresh tiny VLM built as docs/training.md says (`flywheel policy init-vlm`), once; tests load their own
    copy."""
    from typer.testing import CliRunner

    from flywheel.cli import app

    d = tmp_path_factory.mktemp("tiny-vlm") / "tiny-vlm"
    r = CliRunner().invoke(app, ["policy", "init-vlm", str(d), "--image", "224x140", "--coords", "image"])
    assert r.exit_code == 0 and "224x140 images (40 image tokens), coordinates in the image" in r.output, r.output
    return d


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--image", "225x140"], "must be positive multiples of 28"),
        (["--image", "big"], "--image must be WxH"),
        (["--coords", "relative"], "coords must be one of image, screen"),
    ],
)
def test_init_vlm_refuses_a_bad_convention_in_one_line(tmp_path, args, why) -> None:
    from typer.testing import CliRunner

    from flywheel.cli import app

    r = CliRunner().invoke(app, ["policy", "init-vlm", str(tmp_path / "m"), *args])
    assert r.exit_code != 0 and why in r.output and not (tmp_path / "m").exists()


@pytest.fixture(scope="module")
def screens_lake(tmp_path_factory):
    """A lake whose SFT pile holds sandbox episodes with their screenshots in the object store, landed through the
    real intake and routing (expert and novice rollouts, an interactive session)."""
    from flows.config import load_round_config
    from flows.stages import RoundContext, run_stage
    from storage.lake import Lake
    from tests.rounds.helpers import write_config, write_landing

    root = tmp_path_factory.mktemp("vlm-lake")
    lake = Lake.open(root / "lake", create=True)
    landing = write_landing(lake, root / "landing", n_expert=12, n_novice=2, n_inter=1)
    cfg = load_round_config(write_config(root / "round.json"))
    for st in ("intake", "route"):
        run_stage(RoundContext(lake, 0, landing, cfg), st)
    return root / "lake"


def _screenshot(seed: int = 0) -> bytes:
    from training.envs import training_tasks

    env = training_tasks(1, seed)[0].make_env()
    env.reset()
    return env.screenshot()


def _sandbox_prompts(policy, n: int = 4) -> list:
    from training.envs import training_tasks

    view = policy.model.vision
    out = []
    for t in training_tasks(n, 3):
        env = t.make_env()
        env.reset()
        out.append(vision_prompt(policy.tokenizer, view, t.instruction, [], env.screenshot()))
    return out


def teacher_forced(policy, prompts, samples) -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's log-probabilities and logits of the sampled tokens, on each prompt's screenshot (RL's forward)."""
    from training.rl import StepSeq, _images, _pad, forward_policy

    seqs = [StepSeq(list(p.ids) + s.token_ids, len(p.ids), torch.empty(0), torch.empty(0), torch.empty(0),
                    image=p.image) for p, s in zip(prompts, samples)]  # fmt: skip
    ids, resp = _pad(seqs, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        lp, _, logits = forward_policy(policy, ids, resp, _images(seqs))
    return lp, logits


# ------------------------------------------------------------------ the convention
def test_the_coordinate_convention_maps_actions_both_ways_and_is_recorded() -> None:
    v = View(224, 140)
    assert v.tokens == 8 * 5
    assert v.to_model("click(point='<point>639 399</point>')", SCREEN) == "click(point='<point>223 139</point>')"
    assert v.to_screen("click(point='<point>0 0</point>')", SCREEN) == "click(point='<point>1 1</point>')"
    drag = "drag(start_point='<point>100 50</point>', end_point='<point>300 200</point>')"
    assert v.to_model(drag, SCREEN) == "drag(start_point='<point>35 17</point>', end_point='<point>105 70</point>')"
    # a round trip moves a point by at most half a model pixel's width on the screen, plus rounding: 2 px here
    for x, y in [(x, y) for x in range(0, 640, 7) for y in range(0, 400, 5)] + [(639, 399)]:
        a = v.to_screen(v.to_model(f"click(point='<point>{x} {y}</point>')", SCREEN), SCREEN)
        bx, by = (int(t) for t in a.split("<point>")[1].split("</point>")[0].split())
        assert abs(bx - x) <= 2 and abs(by - y) <= 2 and bx < 640 and by < 400
    for text in ("type(content='hi')", "finished(content='42')", "not an action", "wait()"):
        assert v.to_model(text, SCREEN) == text and v.to_screen(text, SCREEN) == text
    screen = View(224, 140, coords="screen")
    assert screen.to_model("click(point='<point>600 300</point>')", SCREEN) == "click(point='<point>600 300</point>')"
    d = v.as_dict([SCREEN, SCREEN])
    assert d["screens"] == {"640x400": [224, 140]} and d["coords"] == "image" and "floor" in d["to_screen"]
    assert View.from_dict(d) == v
    with pytest.raises(ValueError, match="multiples of 28"):
        View(225, 140)
    with pytest.raises(ValueError, match="coords must be one of image, screen"):
        View(224, 140, coords="relative")


def test_the_prompt_the_chat_template_and_the_chat_request_agree(vlm_dir) -> None:
    """The tokens a VLM trains on are the tokens a server builds from the chat request: the checkpoint's chat
    template (what vLLM would apply) and the server's Python reading of the messages give the prompt's text, and
    that text encodes to the prompt's ids, with the screenshot's 40 image tokens."""
    from schemas.prompt import PromptConfig, Turn
    from training.model import Policy
    from training.vision import chat_content, chat_prompt, data_url_bytes, encode_vision_text

    policy = Policy.load(vlm_dir)
    tok, view = policy.tokenizer, policy.model.vision
    hist = [Turn("screen text", "I open it", "click(point='<point>320 200</point>')")]
    shot = _screenshot()
    p = vision_prompt(tok, view, "Open the menu", hist, shot)
    assert p.screen == SCREEN and view.fit(p.image) == (p.image, (224, 140))  # resized once; fitting again: as is
    assert "Step 1: Action: click(point='<point>112 70</point>')" in p.text  # history in the model's coordinates
    assert "screen text" not in p.text and p.text.count(IMAGE) == 1
    messages = [{"role": "user", "content": chat_content(p)}]
    assert tok.apply_chat_template(messages, tokenize=False) == p.text
    text, urls = chat_prompt(messages)
    assert text == p.text and data_url_bytes(urls[0]) == p.image
    assert tuple(encode_vision_text(tok, view, text)) == p.ids
    assert p.ids.count(tok.convert_tokens_to_ids(IMAGE_PAD)) == view.tokens
    # over the budget, whole past actions go (oldest first), never the image or the instruction
    long = [Turn(None, "", f"click(point='<point>{i} {i}</point>')") for i in range(8)]
    full = vision_prompt(tok, view, "Open the menu", long, shot)
    cut = vision_prompt(tok, view, "Open the menu", long, shot, PromptConfig(max_prompt_tokens=len(full.ids) - 5))
    assert len(cut.ids) <= len(full.ids) - 5 and "Step 1:" not in cut.text and "Step 8:" in cut.text
    assert cut.text.startswith("Instruction: Open the menu") and IMAGE in cut.text


def test_sampled_log_probabilities_are_the_learners_own(vlm_dir) -> None:
    """RL's ratios start at 1 only if the sampler's log-probability of each token is what the learner computes
    teacher-forced on the same screenshot: the batched, left-padded generate against the right-padded training
    forward. Seeded sampling repeats itself."""
    from training.generate import sample
    from training.model import Policy

    policy = Policy.load(vlm_dir)
    prompts = _sandbox_prompts(policy)
    s1 = sample(policy.model, policy.tokenizer, prompts, 12, 1.0, torch.Generator().manual_seed(3))
    s2 = sample(policy.model, policy.tokenizer, prompts, 12, 1.0, torch.Generator().manual_seed(3))
    assert [s.token_ids for s in s1] == [s.token_ids for s in s2]
    lp, _ = teacher_forced(policy, prompts, s1)
    assert lp.tolist() == pytest.approx([x for s in s1 for x in s.logprobs], abs=1e-4)
    greedy = sample(policy.model, policy.tokenizer, prompts, 12, 0.0)
    _, logits = teacher_forced(policy, prompts, greedy)  # greedy takes the argmax of the same forward (to float
    chosen = logits.gather(1, torch.tensor([t for g in greedy for t in g.token_ids])[:, None]).squeeze(1)
    assert float((logits.max(-1).values - chosen).max()) < 1e-4  # rounding: an untrained model's ties are close)


# ------------------------------------------------------------------ the jobs
@pytest.mark.slow
def test_a_tiny_vlm_trains_one_sft_and_one_rl_job_on_sandbox_screenshots(vlm_dir, screens_lake) -> None:
    """SFT on the pile's screenshots (loss falls, weights change, the convention recorded with the run and the
    checkpoint), the checkpoint round-trips (publish -> fetch -> load -> the same greedy tokens), then PPO in the
    sandbox from that checkpoint (acting on rendered screenshots; weights change through the policy loss alone)."""
    from storage.lake import Lake
    from training.checkpoints import CACHE, fetch, version_of
    from training.envs import training_tasks
    from training.generate import sample
    from training.model import Policy
    from training.rewards import verifier_reward
    from training.rl import rl_job
    from training.sft import sft_job

    lake = Lake.open(screens_lake)
    policy = Policy.load(vlm_dir, version="init")
    assert policy.kind == "vlm" and 1e5 < policy.n_params < 5e5
    w0 = _weights(policy.model)
    res, sft_pol = sft_job(
        lake, 1, policy, SFTConfig(steps=16, batch_size=8, optim=OptimConfig(lr=3e-3, warmup_steps=2))
    )
    print(f"vlm sft: {res.samples} examples, mean loss of the first 4 steps {_mean(res.losses[:4]):.2f}, "
          f"of the last 4 {_mean(res.losses[-4:]):.2f}")  # fmt: skip
    assert _mean(res.losses[-4:]) < _mean(res.losses[:4]) - 0.5
    w1 = _weights(sft_pol.model)
    assert not torch.equal(w0, w1)
    row = next(r for r in lake.read("training_runs").to_pylist() if r["run_id"] == res.run_id)
    vision = json.loads(row["config"])["vision"]
    assert vision["screens"] == {"640x400": [224, 140]} and vision["coords"] == "image"
    metrics = json.loads(row["metrics"])
    assert metrics["vision"]["without_screenshot"] == 0 and metrics["vision"]["steps"] == row["samples"] > 20

    # the checkpoint round-trips: a fresh process's cache, the same weights, kind, convention and greedy tokens
    shutil.rmtree(CACHE / version_of(res.output_checkpoint), ignore_errors=True)
    back = fetch(lake, res.output_checkpoint)
    assert back.kind == "vlm" and back.model.vision == sft_pol.model.vision
    assert torch.equal(_weights(back.model), w1)
    meta = json.loads((CACHE / back.version / "flywheel_policy.json").read_text())
    assert meta["kind"] == "vlm" and meta["vision"]["width"] == 224 and meta["stage"] == "sft"
    prompts = _sandbox_prompts(back)
    a = sample(sft_pol.model, sft_pol.tokenizer, prompts, 16, 0.0)
    b = sample(back.model, back.tokenizer, prompts, 16, 0.0)
    assert [s.token_ids for s in a] == [s.token_ids for s in b] and any(s.token_ids for s in a)

    # PPO with no rehearsal: whatever changes the weights is the policy's and the critic's own loss
    cfg = RLConfig(algo="ppo", iterations=1, tasks_per_iter=3, group_size=2, value_pretrain_steps=2, minibatch_size=6,
                   curriculum=False, all_equal="keep", rehearsal_coef=0.0, negative_weight=1.0,
                   optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    rres, rl_pol = rl_job(lake, 2, res.output_checkpoint, lambda n, s: training_tasks(n, s), verifier_reward(), cfg,
                          max_new_tokens=24)  # fmt: skip
    it = rres.metrics["iterations"][0]
    assert it["episodes"] == 6 and it["updates"] >= 1 and it["pg_loss"] != 0.0 and it["value_loss"] > 0
    assert it["kl"] < 1e-3  # the first minibatch's ratio is 1: the sampler's log-probabilities are the learner's
    assert not torch.equal(w1, _weights(rl_pol.model))
    assert rres.base_checkpoint == res.output_checkpoint and fetch(lake, rres.output_checkpoint).kind == "vlm"
    row = next(r for r in lake.read("training_runs").to_pylist() if r["run_id"] == rres.run_id)
    assert json.loads(row["config"])["vision"]["screens"] == {"640x400": [224, 140]}


def test_a_vlm_refuses_what_needs_text_screens(vlm_dir, screens_lake, tmp_path) -> None:
    from storage.lake import Lake
    from tests.training.fakes import tasks
    from training.model import Policy
    from training.rewards import verifier_reward
    from training.rl import train_rl
    from training.rollout import run_episodes
    from training.sft import sft_job

    policy = Policy.load(vlm_dir)
    with pytest.raises(ValueError, match="grounding rehearsal clicks on text screens"):
        sft_job(Lake.open(screens_lake), 1, policy, SFTConfig(steps=1, grounding=0.5))
    # a pile whose screenshots are gone from the object store: said in one line, not trained around
    shutil.copytree(screens_lake, tmp_path / "copy")
    for png in (tmp_path / "copy" / "objects").rglob("*.png"):
        png.unlink()
    with pytest.raises(ValueError, match=r"gives a vision-language policy nothing to train on: its \d+ steps have no"):
        sft_job(Lake.open(tmp_path / "copy"), 1, policy, SFTConfig(steps=1))
    with pytest.raises(ValueError, match="acts on screenshots, and sandbox's environment gives none"):
        run_episodes(policy.model, policy.tokenizer, tasks(1, 0))  # the stand-in env has text screens only
    with pytest.raises(ValueError, match="use groups='episode' for a vision-language policy"):
        train_rl(policy, lambda n, s: tasks(n, s), verifier_reward(), RLConfig(groups="step", iterations=1))
