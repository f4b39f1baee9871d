"""Training benchmarks, each a ratio against a baseline measured in the same run.

1. Throughput: the SFT loop (training/loop.py: masked loss with the LM head only on agent tokens, warmup+cosine,
   clipping) in tokens/s against a bare PyTorch loop over the same model and the same batches (full logits,
   masked cross-entropy, plain AdamW); and the same loop compiled (training/compiled.py, the demo's setting)
   against itself eager, target 1.2x.
2. Generation: training/generate.sample (in-place KV cache, finished rows leaving the batch) against transformers'
   own `generate` on the same prompts (greedy, the cold-start policy: realistic answer lengths), tokens/s; both must
   write the same tokens.
3. Ablation on the same round: from one cold-start SFT checkpoint, SFT+RL against SFT alone (the same extra SFT
   steps), held-out pass rate of each.

BENCH_QUICK=1 shrinks both (a smoke run: the ablation's numbers then mean little). BENCH_TRAINING_ABLATION=0 skips 3
(make bench does: bench_practice asks the same question with equal wall time per arm, and 3 took 4 of make bench's
36 minutes).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from bench.common import Figure, quick


def _expert_items(policy, n_tasks: int, prompt_cfg, families: tuple[str, ...] | None = None):
    """The expert's examples on n_tasks training tasks (seed 4242); with `families`, only those tasks' (a share of
    the same episodes, not new ones)."""
    from sandbox.demonstrators import Expert
    from sandbox.heldout import training_tasks
    from sandbox.rollout import run_attempt, to_episode
    from training.data import encode_all, episode_examples

    tasks = [t for t in training_tasks(n_tasks, seed=4242) if families is None or t.family in families]
    rows = [to_episode(run_attempt(t, Expert(0)), "rollout", "bench").to_row() for t in tasks]
    return encode_all(policy.tokenizer, [x for r in rows for x in episode_examples(r, prompt_cfg)], prompt_cfg)


def _bare_loop(model, batches: list) -> float:
    """The baseline: the plainest correct PyTorch loop over the same batches."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    t0 = time.perf_counter()
    for b in batches:
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1]
        nll = F.cross_entropy(logits.transpose(1, 2), b.input_ids[:, 1:], reduction="none")
        m = b.loss_mask[:, 1:]
        loss = (nll * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def _policy_and_items():
    """The demo's model (the shipped base) and the expert examples of 200 training tasks (60 quick)."""
    from flows.config import tuned_flywheel
    from training.base import sandbox_texts
    from training.model import Policy

    f = tuned_flywheel()
    pol = Policy.create(sandbox_texts(200), f.model)
    return pol, _expert_items(pol, 60 if quick() else 200, f.prompt)


def throughput(pol, items) -> Figure:
    """Our SFT loop, eager (the compiled one is `compiled_step`), against the bare loop, same batches."""
    from flows.config import tuned_flywheel
    from training.data import batches as make_batches
    from training.loop import train_lm

    f = tuned_flywheel()
    steps = 4 if quick() else 20
    bs = list(make_batches(items, 32, steps, pol.tokenizer.pad_token_id, seed=1))
    tokens = sum(b.n_tokens for b in bs)
    state = {k: v.clone() for k, v in pol.model.state_dict().items()}
    base_s = _bare_loop(pol.model, bs)
    pol.model.load_state_dict(state)
    t0 = time.perf_counter()
    train_lm(pol.model, iter(bs), steps, replace(f.sft.optim, bf16=False, compile=False))
    ours_fp32 = time.perf_counter() - t0
    # bf16 on the first quarter of the batches: on a CPU without native bf16 it runs ~10x slower, and all 20 took
    # 3 of make bench's 36 minutes for a figure that only says which precision is faster
    pol.model.load_state_dict(state)
    k = max(2, steps // 4)
    t0 = time.perf_counter()
    train_lm(pol.model, iter(bs[:k]), k, replace(f.sft.optim, bf16=True, compile=False))
    pol.model.load_state_dict(state)
    bf16_rate = sum(b.n_tokens for b in bs[:k]) / (time.perf_counter() - t0)
    fp32_rate = tokens / ours_fp32
    from training.precision import choose

    pick = choose("auto", pol.model, 32)  # what the demo's precision="auto" trains in on this machine
    return Figure(
        "SFT training throughput", max(fp32_rate, bf16_rate), tokens / base_s, "tok/s", target=1.0,
        note=f"{pol.n_params / 1e6:.2f}M params, {steps} batches of 32; fp32 {fp32_rate:,.0f} tok/s, "
             f"bf16 {bf16_rate:,.0f} tok/s (first {k} batches); the demo's precision=auto picks {pick.name} ({pick.source})",
    )  # fmt: skip


def compiled_step(pol, items) -> Figure:
    """The demo's SFT step through torch.compile (training/compiled.py) against the same loop eager: the same
    batches of 16, in the precision the demo picks here; the one-off compile (warm-up on the shortest and the
    longest batch) is timed apart and stated, not counted."""
    from flows.config import tuned_flywheel
    from training.data import batches as make_batches
    from training.loop import train_lm
    from training.precision import choose

    f = tuned_flywheel()
    steps = 4 if quick() else 30
    bs = list(make_batches(items, 16, steps, pol.tokenizer.pad_token_id, seed=2))
    warm = sorted(bs, key=lambda b: b.input_ids.shape[1])
    warm = [warm[0], warm[-1]]
    tokens = sum(b.n_tokens for b in bs)
    bf16 = choose("auto", pol.model, 16).bf16
    cfg = replace(f.sft.optim, bf16=bf16)
    state = {k: v.clone() for k, v in pol.model.state_dict().items()}
    t0 = time.perf_counter()
    train_lm(pol.model, iter(warm), len(warm), replace(cfg, compile=True))
    compile_s = time.perf_counter() - t0
    rates = {}
    for on in (False, True, False, True):  # interleaved, best of two each: the machine's noise moves both alike
        pol.model.load_state_dict(state)
        t0 = time.perf_counter()
        train_lm(pol.model, iter(bs), steps, replace(cfg, compile=on))
        rates[on] = max(rates.get(on, 0.0), tokens / (time.perf_counter() - t0))
    pol.model.load_state_dict(state)
    from training.compiled import failure

    return Figure(
        "SFT step compiled vs eager", rates[True], rates[False], "tok/s", target=1.2,
        note=f"{steps} batches of 16, {'bf16' if bf16 else 'fp32'}; compile (once a process) {compile_s:.0f} s"
             + (f"; the compile FAILED ({failure()}), both eager" if failure() else ""),
    )  # fmt: skip


def generation(pol, prompt_cfg, max_new_tokens: int) -> Figure:
    """Greedy tokens/s of training.generate.sample against transformers' generate, the same 512 prompts (the first
    observations of 128 training tasks, 4 copies each as a group would ask), batches of 256."""
    from training.envs import training_tasks
    from training.generate import sample
    from training.prompt import encode_prompt, render_prompt

    tok = pol.tokenizer
    tasks = training_tasks(16 if quick() else 128, 100_000)
    prompts = [encode_prompt(tok, render_prompt(t.instruction, [], t.make_env().reset(), prompt_cfg), prompt_cfg)
               for t in tasks for _ in range(4)]  # fmt: skip
    t0 = time.perf_counter()
    ours = sample(pol.model, tok, prompts, max_new_tokens, 0.0, batch_size=256)
    ours_s = time.perf_counter() - t0
    theirs: list[list[int]] = []
    t0 = time.perf_counter()
    for i in range(0, len(prompts), 256):
        chunk = prompts[i : i + 256]
        L = max(len(p) for p in chunk)
        ids = torch.tensor([[tok.pad_token_id] * (L - len(p)) + list(p) for p in chunk])
        att = (torch.arange(L)[None, :] >= torch.tensor([L - len(p) for p in chunk])[:, None]).long()
        with torch.no_grad():
            out = pol.model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
        theirs += [row[L:].tolist() for row in out]
    hf_s = time.perf_counter() - t0
    n = sum(len(s.token_ids) for s in ours)
    same = sum(s.token_ids == t[: len(s.token_ids)] for s, t in zip(ours, theirs))
    return Figure("greedy generation, tokens/s vs transformers' generate", n / ours_s, n / hf_s, "tok/s", target=1.0,
                  note=f"{len(prompts)} prompts, {n:,} tokens; ours {ours_s:.1f} s, generate {hf_s:.1f} s; "
                       f"the same tokens for {same}/{len(prompts)}")  # fmt: skip


def ablation() -> list[Figure]:
    """The practice bench's start, the demo's round 0 (which the generation figure measures), then on the same round
    and from the same checkpoint SFT alone vs SFT + RL, held-out pass rate (skipped with BENCH_TRAINING_ABLATION=0)."""
    from bench.bench_practice import round0_start
    from flows.config import tuned_flywheel
    from training.envs import heldout_tasks, training_tasks
    from training.evaluate import evaluate
    from training.model import Policy
    from training.rewards import verifier_reward
    from training.rl import train_rl
    from training.sft import train_sft

    f = tuned_flywheel()
    # bench_practice's start, the demo's round 0 (precision "auto", as the demo chooses it), built once per run: make
    # bench runs bench_practice first, so this loads it
    pol, items = round0_start()
    gen = generation(pol, f.prompt, f.max_new_tokens)
    if os.environ.get("BENCH_TRAINING_ABLATION", "1") == "0":
        return [gen]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        pol.save(d)
        a, b = Policy.load(d), Policy.load(d)
    sft_cfg = replace(f.sft, steps=5, epochs=None if quick() else f.sft.epochs, optim=replace(f.sft.optim, bf16="auto"))
    train_sft(a, items, sft_cfg)
    train_sft(b, items, sft_cfg)
    rl = replace(f.rl, tasks_per_iter=4 if quick() else f.rl.tasks_per_iter)
    train_rl(b, lambda n, seed: training_tasks(n, 100_000 + seed), verifier_reward(), rl, f.prompt, f.max_new_tokens)
    ho = heldout_tasks(1 if quick() else None)
    ra, rb = evaluate(a, ho, f.eval, f.prompt), evaluate(b, ho, f.eval, f.prompt)
    return [
        gen,
        Figure(
            "held-out pass rate, SFT+RL vs SFT alone (same round)",
            rb.overall.rate,
            max(ra.overall.rate, 1e-9),
            "rate",
            note=f"SFT alone {ra.overall.rate:.3f} [{ra.overall.lo:.3f}, {ra.overall.hi:.3f}], SFT+RL {rb.overall.rate:.3f} "
            f"[{rb.overall.lo:.3f}, {rb.overall.hi:.3f}], n={ra.overall.n}",
        ),  # fmt: skip
    ]


def run() -> list[Figure]:
    pol, items = _policy_and_items()
    return [throughput(pol, items), compiled_step(pol, items), *ablation()]
