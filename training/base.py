"""The base model: a small Llama pretrained on generic GUI skills before any flywheel round (nanochat's base stage).

Why: UI-TARS-2 starts its flywheel from a model that can already read a screen and point at what it names; a policy
built from scratch on 2 CPU cores cannot learn that inside a round (docs/training.md: it writes the right element
name and then coordinates it memorised). The base learns two task-free skills on the sandbox's screens:

- grounding: `Click the <role> "<name>".` on a screen -> `Thought: <that element's screen line>` and the click on
  its centre (the `line` thought style the demo trains with), with and without earlier actions in the prompt;
- copying: spans of the same text repeated later (training/warmup.py), the induction circuit.

It never sees a task's goal, a demonstrator's answer or a held-out screen: what a task asks for, in which order,
through which menus, forms and dialogs, is left to the flywheel's rounds. `python -m training.base --out DIR` builds
one (minutes on a GPU, hours on 2 CPU cores); the demo starts from the one shipped in `models/` (`BASE_MODEL`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from schemas.prompt import PromptConfig
from training.config import ModelConfig, OptimConfig, WarmupConfig, to_dict
from training.data import Batch, collate, encode_all
from training.prompt import SCREEN_LINE, Turn, render_answer, render_prompt

#: The base model the demo starts from (built by `python -m training.base`, see its flywheel_policy.json).
BASE_MODEL = Path(__file__).resolve().parent.parent / "models" / "sandbox-base"

#: The base's architecture and prompt: the demo fine-tunes the base, so it must use exactly these (training/demo.py).
BASE_ARCH = ModelConfig(vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=3, max_number=640)
BASE_PROMPT = PromptConfig(history_full=0, history_max=2, max_thought_words=8, thought_style="line")


@dataclass(frozen=True)
class BaseConfig:
    model: ModelConfig = BASE_ARCH
    prompt: PromptConfig = BASE_PROMPT
    tasks: int = 20_000  # training tasks whose expert and novice screens are the grounding pool
    examples: int = 200_000  # grounding examples drawn from that pool
    test_tasks: int = 200  # other training tasks whose screens measure grounding (never trained on)
    test_examples: int = 512
    vocab_tasks: int = 2000  # tasks whose instructions and first screens the tokenizer also learns from
    copy_fraction: float = 0.25  # share of steps on copy sequences
    steps: int = 2_000
    batch_size: int = 64
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, warmup_steps=100, bf16=True))
    warmup: WarmupConfig = field(default_factory=WarmupConfig)  # span and gap sizes of the copy sequences
    minutes: float | None = None  # train for about this long instead of `steps` (sized from timed steps 10-40)
    seed: int = 0


def screens(n_tasks: int, seed: int) -> list[tuple[str, list[Turn]]]:
    """(observation, earlier turns) of every step the expert and the novice take on `n_tasks` training tasks."""
    from sandbox.demonstrators import Expert, Novice
    from sandbox.heldout import training_tasks
    from sandbox.parallel import run_many

    procs = max(1, min(8, (os.cpu_count() or 1) - 2))
    out = []
    for who in (Expert, Novice):
        for a in run_many(training_tasks(n_tasks, seed=seed), who, processes=procs, chunk=500):
            hist: list[Turn] = []
            for s in a.steps:
                if s.observation:
                    out.append((s.observation, list(hist)))
                hist.append(Turn(s.observation, s.thought, s.action))
    return out


def sandbox_texts(n: int = 350, seed: int = 12345) -> list[str]:
    """The sandbox's vocabulary: instructions and first screens of generated training tasks (never held-out)."""
    from sandbox.env import Env
    from sandbox.heldout import training_tasks

    out = []
    for t in training_tasks(n, seed):
        out += [t.instruction, Env(t).reset().text]
    return out


def _element_lines(obs: str) -> list[re.Match[str]]:
    return [m for m in (SCREEN_LINE.match(x.strip()) for x in obs.splitlines()) if m and m["role"] != "window"]


def grounding_examples(
    pool: Sequence[tuple[str, list[Turn]]], n: int, cfg: PromptConfig, seed: int = 0
) -> list[tuple[str, str]]:
    """`n` (prompt, answer) pairs: click the element a one-line instruction names, on a screen from `pool`; half of
    them keep the screen's real earlier actions in the prompt (the policy must learn to look past them)."""
    rng = random.Random(seed)
    targets = [i for i, (obs, _) in enumerate(pool) if _element_lines(obs)]  # a screen in another format has none
    out: list[tuple[str, str]] = []
    while targets and len(out) < n:
        obs, hist = pool[targets[rng.randrange(len(targets))]]
        m = rng.choice(_element_lines(obs))
        instruction = f'Click the {m["role"]} "{m["name"]}".'
        action = f"click(point='<point>{m['x']} {m['y']}</point>')"
        prompt = render_prompt(instruction, hist if rng.random() < 0.5 else [], obs, cfg)
        out.append((prompt, render_answer("", action, cfg, obs, instruction)))
    return out


class Bank:
    """Encoded examples padded into one tensor on the training device, so a step draws its batch with one index
    (no per-step Python collation: on a GPU that, not the model, was the bottleneck)."""

    def __init__(self, items: Sequence, pad_id: int, device: str) -> None:
        b = collate(items, pad_id)
        self.ids, self.mask = b.input_ids.to(device), b.loss_mask.to(device)
        self.lengths = b.attention_mask.sum(1).to(device)

    def sample(self, n: int, gen: torch.Generator) -> Batch:
        idx = torch.randint(len(self.ids), (n,), generator=gen).to(self.ids.device)
        t = int(self.lengths[idx].max())
        ids, mask = self.ids[idx, :t], self.mask[idx, :t]
        lengths = self.lengths[idx, None]
        return Batch(ids, (torch.arange(t, device=ids.device)[None] < lengths).long(), mask)


def mixed_batches(
    ground: Bank, copy: Bank, cfg: BaseConfig, steps: int, deadline: float | None = None
) -> Iterator[Batch]:
    """Grounding batches, with a `copy_fraction` share of copy-sequence batches mixed in (seeded); ends early at
    `deadline` (perf_counter seconds), so a timed build never overruns its budget."""
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed + 1)
    for _ in range(steps):
        if deadline is not None and time.perf_counter() > deadline:
            return
        yield (copy if rng.random() < cfg.copy_fraction else ground).sample(cfg.batch_size, gen)


@torch.no_grad()
def answer_accuracy(model, items: Sequence, pad_id: int, device: str = "cpu") -> float:  # noqa: ANN001
    """Share of examples whose every answer token is the model's argmax (teacher-forced): a whole line and click
    right, not just most of its tokens."""
    model.eval()
    ok = 0
    for i in range(0, len(items), 64):
        b = collate(items[i : i + 64], pad_id)
        ids, m = b.input_ids.to(device), b.loss_mask[:, 1:].to(device) > 0
        pred = model(input_ids=ids).logits[:, :-1].argmax(-1)
        ok += int(((pred == ids[:, 1:]) | ~m).all(1).sum())
    model.train()
    return ok / max(len(items), 1)


def build_base(  # noqa: ANN201
    cfg: BaseConfig, out: Path, device: str = "cpu", log: Callable[[str], None] = print, init: Path | None = None
):
    """Tokenizer, model, grounding + copy training; saves the policy folder to `out` and returns (policy, meta).
    `init`: continue from an earlier base folder (its tokenizer and weights) instead of a fresh model."""
    from training.loop import train_lm
    from training.model import Policy
    from training.warmup import copy_example

    t0 = time.perf_counter()
    pool = screens(cfg.tasks, seed=cfg.seed + 7)
    test_pool = screens(cfg.test_tasks, seed=cfg.seed + 99_991)
    ground = grounding_examples(pool, cfg.examples, cfg.prompt, cfg.seed)
    test = grounding_examples(test_pool, cfg.test_examples, cfg.prompt, cfg.seed + 1)
    texts = [p + a for p, a in ground[:20_000]] + sandbox_texts(cfg.vocab_tasks)
    policy = Policy.load(init) if init else Policy.create(texts, cfg.model)
    tok = policy.tokenizer
    test_items = encode_all(tok, test, cfg.prompt)
    corpus = [i for t in texts[:4000] for i in tok.encode(t + "\n", add_special_tokens=False)]
    rng = random.Random(cfg.seed)
    wcfg = replace(cfg.warmup, batch_size=cfg.batch_size)
    gbank = Bank(encode_all(tok, ground, cfg.prompt), tok.pad_token_id, device)
    cbank = Bank([copy_example(corpus, wcfg, rng) for _ in range(max(1, cfg.examples // 4))], tok.pad_token_id, device)
    log(
        f"data: {len(pool)} screens, {len(ground)} grounding examples, {policy.n_params} parameters, {time.perf_counter() - t0:.0f}s"
    )
    model = policy.model.to(device)
    steps = cfg.steps
    if cfg.minutes:  # time steps 10-40 (the first ones pay for lazy initialisation), then size the schedule
        stamps: list[float] = []
        train_lm(model, mixed_batches(gbank, cbank, cfg, 40), 40, replace(cfg.optim, lr=cfg.optim.lr / 10),
                 lambda i, _: stamps.append(time.perf_counter()), device=device)  # fmt: skip
        per_step = (stamps[-1] - stamps[9]) / 30
        steps = max(40, int(cfg.minutes * 60 / per_step))
        log(f"{per_step * 1000:.1f} ms/step -> {steps} steps in {cfg.minutes} min")
    every = max(steps // 10, 1)

    def on_step(i: int, loss: float) -> None:
        if (i + 1) % every == 0:
            log(
                f"step {i + 1}/{steps} loss {loss:.4f} grounding exact {answer_accuracy(model, test_items, tok.pad_token_id, device):.3f}"
            )

    deadline = time.perf_counter() + cfg.minutes * 66 if cfg.minutes else None
    losses, tokens = train_lm(
        model, mixed_batches(gbank, cbank, cfg, steps, deadline), steps, cfg.optim, on_step, device=device
    )
    acc = answer_accuracy(model, test_items, tok.pad_token_id, device)
    policy.model = model.to("cpu")
    meta = {"kind": "base", "init": str(init) if init else None, "config": to_dict(cfg), "steps": len(losses), "tokens": tokens, "loss_first": losses[0], "loss_last": losses[-1],
            "grounding_exact": acc, "device": device, "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
    policy.save(out, meta)
    log(json.dumps({k: v for k, v in meta.items() if k != "config"}))
    return policy, meta


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build the sandbox base model (grounding + copying).")
    ap.add_argument("--out", type=Path, default=BASE_MODEL)
    ap.add_argument("--steps", type=int, default=BaseConfig.steps)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--batch-size", type=int, default=BaseConfig.batch_size)
    ap.add_argument("--tasks", type=int, default=BaseConfig.tasks)
    ap.add_argument("--examples", type=int, default=BaseConfig.examples)
    ap.add_argument("--lr", type=float, default=BaseConfig().optim.lr)
    ap.add_argument("--layers", type=int, default=BaseConfig().model.num_hidden_layers)
    ap.add_argument("--hidden", type=int, default=BaseConfig().model.hidden_size)
    ap.add_argument("--init", type=Path, default=None)
    ap.add_argument("--copy-fraction", type=float, default=BaseConfig.copy_fraction)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args(argv)
    cfg = BaseConfig(
        steps=a.steps,
        copy_fraction=a.copy_fraction,
        minutes=a.minutes,
        batch_size=a.batch_size,
        tasks=a.tasks,
        examples=a.examples,
    )
    cfg = replace(
        cfg,
        optim=replace(cfg.optim, lr=a.lr),
        model=replace(cfg.model, num_hidden_layers=a.layers, hidden_size=a.hidden, intermediate_size=2 * a.hidden),
    )
    build_base(cfg, a.out, a.device, log=lambda s: print(s, flush=True), init=a.init)


if __name__ == "__main__":
    main()
