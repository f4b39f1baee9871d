"""What copying buys from the practice benchmark's cold start, time aside: the controls RL is read against.

  fixed   SFT on the same 490 expert episodes the cold start copied;
  fresh   SFT on N fresh expert episodes (new tasks, the same demonstrator);
  rft     rejection-sampling fine-tuning: the expert examples + the cold policy's own passing T=1 attempts at M tasks
          x K attempts;
  dagger  the expert's label at every state of the cold policy's greedy attempts on M fresh tasks where its own
          step did not move the task along (DAgger at the policy's mistakes: what a perfect corrector would give
          practice), mixed with the expert examples at `share` of each batch;
  search  what practice's screen search finds (training/explore.py, `RLConfig.explore`) at the cold policy's greedy
          attempts on M fresh tasks (`--at` all or mistakes, `--max-states` per attempt, `--keep` best or all), mixed
          the same way (`--share 1`: the corrections alone): its corrections' worth per step, acting's cost aside.

Each arm trains STEPS SFT steps (batch 16, the tuned SFT optimiser) from the cold start cached in FOLDER and prints
the 280-task held-out rate with its 95% interval, per level, and the exact McNemar p against the cold start.
`python -m bench.copying_arms fresh 800 /tmp/practice-cold --n 3000` (docs/training.md, "Practice").
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator

import typer

from bench.bench_practice import _levels, _rate, cold_start
from bench.common import console, quick

app = typer.Typer(add_completion=False)


def _fresh(pol, f, n: int) -> list:
    from sandbox.demonstrators import Expert
    from sandbox.heldout import training_tasks
    from sandbox.rollout import run_attempt, to_episode
    from training.data import encode_all, episode_examples

    rows = [to_episode(run_attempt(t, Expert(0)), "rollout", "x").to_row() for t in training_tasks(n, seed=777)]
    return encode_all(pol.tokenizer, [x for r in rows for x in episode_examples(r, f.prompt)], f.prompt)


def _own_successes(pol, f, m: int, k: int) -> list:
    from training.envs import training_tasks
    from training.prompt import Encoded
    from training.rollout import run_episodes

    trajs = run_episodes(pol.model, pol.tokenizer, list(training_tasks(m, 100_000)), attempts=k, temperature=1.0,
                         max_new_tokens=f.max_new_tokens, prompt_cfg=f.prompt, seed=3)  # fmt: skip
    own = [Encoded(list(s.prompt_ids) + list(s.response_ids), [0] * len(s.prompt_ids) + [1] * len(s.response_ids))
           for tr in trajs if tr.passed for s in tr.steps]  # fmt: skip
    console.print(f"rft: {len(trajs)} attempts, {sum(t.passed for t in trajs)} passed, {len(own)} steps")
    return own


def _expert_at_mistakes(pol, f, m: int) -> list:
    """The expert's action, rendered as the prompt format writes it, at each first visit of a state where the cold
    policy's greedy step did not earn +1 (training.branch's progress signal)."""
    from sandbox.demonstrators import Expert
    from schemas.actions import format_action
    from training.branch import first_visits, shaped
    from training.envs import training_tasks
    from training.prompt import Encoded, render_answer
    from training.rollout import run_episodes

    tok = pol.tokenizer
    trajs = run_episodes(pol.model, tok, list(training_tasks(m, 200_000)), attempts=1, temperature=0.0,
                         max_new_tokens=f.max_new_tokens, prompt_cfg=f.prompt, seed=0)  # fmt: skip
    out, seen, n_states = [], set(), 0
    for tr in trajs:
        env = tr.task.make_env()
        env.reset()
        for t, st in enumerate(tr.steps):
            before = env.steps_to_go()
            if before is None:  # it can no longer pass: nothing to correct
                break
            n_states += 1
            c = env.clone()
            if st.readable:
                _, done, _ = c.step(st.action)
                r = shaped(before, None if done else c.steps_to_go(), done, done and c.verify()[0])
            else:
                r = -1.0
            if r < 1.0 and first_visits(tr, [t], seen):
                action = format_action(Expert().move(env.env).action())
                answer = render_answer("", action, f.prompt, st.observation, tr.task.instruction)
                ans = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                out.append(Encoded(list(st.prompt_ids) + ans, [0] * len(st.prompt_ids) + [1] * len(ans)))
            if not st.readable:
                break
            _, done, _ = env.step(st.action)
            if done:
                break
    console.print(f"dagger: {m} tasks, {n_states} states, {len(out)} mistakes labelled by the expert")
    return out


def _searched(pol, f, m: int, at: str, max_states: int, keep: str) -> list:
    """The verified corrections of `RLConfig.explore`'s search at the cold policy's states on m fresh tasks."""
    from training.branch import step_groups, verified
    from training.envs import training_tasks
    from training.prompt import Encoded

    out, states = [], 0
    for k in range(0, m, 32):
        cands, _, st = step_groups(pol.model, pol.tokenizer, list(training_tasks(min(32, m - k), 105_000 + k)),
                                   group_size=0, temperature=1.0, max_new_tokens=f.max_new_tokens, prompt_cfg=f.prompt,
                                   policy_version="cold", seed=k, max_states=max_states, at=at, explore=True,
                                   explore_keep=keep)  # fmt: skip
        states += st["states"]
        out += [Encoded(c.prompt_ids + c.response_ids, [0] * len(c.prompt_ids) + [1] * len(c.response_ids))
                for c in cands if verified(c)]  # fmt: skip
    console.print(f"search: {m} tasks, {states} states, {len(out)} corrections ({keep}, at {at})")
    return out


def _mixed(extra: list, items: list, share: float, pad: int, seed: int = 7) -> Iterator:
    from training.data import collate

    rng = random.Random(seed)
    while True:
        k = min(len(extra), round(share * 16))
        rows = rng.sample(extra, k) + [items[rng.randrange(len(items))] for _ in range(16 - k)]
        yield collate(rows, pad)


@app.command()
def main(
    arm: str = typer.Argument(..., help="fixed | fresh | rft | dagger | search"),
    steps: int = typer.Argument(..., help="SFT steps (batch 16)"),
    folder: str = typer.Argument(..., help="the cached cold start (made there on first use)"),
    n: int = typer.Option(3000, help="fresh: expert episodes"),
    m: int = typer.Option(600, help="rft, dagger: tasks the cold policy attempts"),
    k: int = typer.Option(8, help="rft: attempts per task"),
    share: float = typer.Option(0.5, help="dagger, search: the labelled states' share of each batch"),
    at: str = typer.Option("all", help="search: branch all states or only the mistakes"),
    max_states: int = typer.Option(4, help="search: states branched per attempt"),
    keep: str = typer.Option("best", help="search: best (the policy's likeliest verified action) or all"),
) -> None:
    from core.stats import paired_test
    from flows.config import tuned_flywheel
    from training.data import batches
    from training.envs import heldout_tasks
    from training.evaluate import evaluate
    from training.loop import train_lm

    if arm not in ("fixed", "fresh", "rft", "dagger", "search"):
        raise typer.BadParameter(f"arm is fixed, fresh, rft, dagger or search, not {arm!r}")
    f = tuned_flywheel()
    pol, items = cold_start(folder)
    ho = heldout_tasks(1 if quick() else None)  # BENCH_QUICK: one task per cell, a smoke run
    before = evaluate(pol, ho, f.eval, f.prompt)
    t0 = time.perf_counter()
    pad = pol.tokenizer.pad_token_id
    if arm in ("dagger", "search"):
        extra = _expert_at_mistakes(pol, f, m) if arm == "dagger" else _searched(pol, f, m, at, max_states, keep)
        data = itertools.islice(_mixed(extra, [] if share >= 1 else items, share, pad), steps)  # train_lm takes all
    else:
        extra = {"fixed": lambda: items, "fresh": lambda: _fresh(pol, f, n),
                 "rft": lambda: items + _own_successes(pol, f, m, k)}[arm]()  # fmt: skip
        data = batches(extra, 16, steps, pad, seed=7)
    prep = time.perf_counter() - t0
    losses, _ = train_lm(pol.model, data, steps, f.sft.optim)
    after = evaluate(pol, ho, f.eval, f.prompt)
    p = paired_test(before.passed, after.passed)["p"]
    console.print(f"copying {arm} ({steps} steps, prep {prep:.0f} s, train {time.perf_counter() - t0 - prep:.0f} s): "
                  f"held-out {_rate(before)} -> {_rate(after)} ({_levels(after)}), McNemar p={p:.2g}")  # fmt: skip


if __name__ == "__main__":
    app()
