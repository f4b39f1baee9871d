"""Specialists and their merge (issue 25, UI-TARS-2 section 2.6), measured from one checkpoint in process.

From the practice benchmark's cold start (cached in FOLDER), two specialists practise one world each with the
project's RL (RLConfig's defaults: GRPO groups of 8, PPO-ptx rehearsal on the world's share of the cold start's
expert examples), ITERS iterations each; joint RL runs 2 x ITERS iterations on both worlds with both shares (the same
total compute, counted in iterations: the same number of acted episodes and of update steps). Then the merge
theta(alpha) = alpha theta_first + (1 - alpha) theta_second for alpha in {0.25, 0.5, 0.75} (0 and 1 are the
specialists), and every model on each world's held-out tasks (all of them), with 95% Wilson intervals and exact
McNemar tests on the same tasks:

- each specialist against the cold start on its own world (the acceptance: a clear gain, p < 0.01);
- each merge's share of each specialist's gain on that specialist's world (the acceptance: >= 90%);
- the chosen merge (best worst-world score) against joint RL on the worse of the two worlds.

`python -m bench.merge_arms 20 /tmp/practice-cold` (docs/training.md, "Specialists and merging"); `--search S`: each
specialist practises by search and imitation for S seconds instead (training/search_practice.py), joint for 2 S. The worlds are the
round config example's (examples/round-specialists.toml): forms (fill_form, checkboxes) and menus (menu_path,
scroll_find, click_button). The world-subset rule (the same 490 expert episodes, split by family) means neither
specialist sees data the joint run does not; `--rehearse-all` gives each specialist both shares as its rehearsal
(what a round's specialists get: the round's whole SFT pile), while it still practises only its own world.
"""

from __future__ import annotations

import typer

from bench.bench_practice import _levels, _rate, cold_start, rl_arm, search_arm
from bench.bench_training import _expert_items
from bench.common import console, quick

WORLDS = {"forms": ("fill_form", "checkboxes"), "menus": ("menu_path", "scroll_find", "click_button")}
GRID = (0.25, 0.5, 0.75)

app = typer.Typer(add_completion=False)


@app.command()
def main(
    iterations: int = typer.Argument(20),
    folder: str = typer.Argument("/tmp/practice-cold"),
    rehearsal_steps: int = typer.Option(0, help="copying steps after each RL update (RLConfig.rehearsal_steps)"),
    pg_coef: float = typer.Option(1.0, help="RLConfig.pg_coef: 0 is the control (acting and rehearsal, no RL loss)"),
    specialists_only: bool = typer.Option(False, help="train and evaluate the base and the specialists only"),
    rehearse_all: bool = typer.Option(
        False,
        help="each specialist rehearses the whole cold start's expert examples (both worlds), as a round's "
        "specialists rehearse the round's whole SFT pile; it still practises only its own world",
    ),
    search: float = typer.Option(
        0.0,
        help="practise by search and imitation for this many seconds a specialist "
        "(joint: twice that) instead of ITERATIONS of policy-gradient RL",
    ),
) -> None:
    import tempfile

    from core.stats import paired_test
    from flows.config import tuned_flywheel
    from training.envs import heldout_tasks
    from training.evaluate import evaluate
    from training.merge import merge_policies
    from training.model import Policy

    f = tuned_flywheel()
    base, _ = cold_start(folder)
    names = list(WORLDS)
    held = {w: heldout_tasks(1 if quick() else None, families=WORLDS[w]) for w in names}
    items = {w: _expert_items(base, 60 if quick() else 490, f.prompt, WORLDS[w]) for w in names}
    console.print("worlds: " + "; ".join(f"{w} {WORLDS[w]}: {len(held[w])} held-out tasks, {len(items[w])} "
                                         "expert examples" for w in names))  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        base.save(d)
        models = {"base": base} | {w: Policy.load(d) for w in names}
        if not specialists_only:
            models["joint"] = Policy.load(d)
    secs = {}

    def practise(w: str, families: tuple[str, ...], examples: list, n: int) -> None:
        """RL (RLConfig's practice defaults) on the world's tasks for n iterations, no time budget; with --search,
        practice by search and imitation for n / iterations x `search` seconds."""
        if search:
            secs[w] = search_arm(models[w], search * n / iterations, examples, families)[1]
            return
        secs[w] = rl_arm(models[w], 0.0, examples, families, iterations=n, time_budget_s=None,
                         rehearsal_steps=rehearsal_steps, pg_coef=pg_coef)[1]  # fmt: skip

    for w in names:
        practise(w, WORLDS[w], items[names[0]] + items[names[1]] if rehearse_all else items[w], iterations)
    if not specialists_only:
        practise("joint", tuple(x for w in names for x in WORLDS[w]), items[names[0]] + items[names[1]], 2 * iterations)
        for a in GRID:
            models[f"merge {a}"] = merge_policies({names[0]: models[names[0]], names[1]: models[names[1]]},
                                                  {names[0]: a, names[1]: 1 - a})  # fmt: skip
    res = {}
    for m, pol in models.items():
        res[m] = {w: evaluate(pol, held[w], f.eval, f.prompt) for w in names}
        console.print(f"{m}: " + "; ".join(f"{w} {_rate(res[m][w])} ({_levels(res[m][w])})" for w in names))

    def rate(m: str, w: str) -> float:
        return res[m][w].overall.rate

    console.rule("specialists and their merge")
    console.print(f"RL seconds: {', '.join(f'{k} {v:.0f}' for k, v in secs.items())} ({iterations} iterations each "
                  f"specialist, {2 * iterations} joint)")  # fmt: skip
    console.print("| model | " + " | ".join(names) + " | worst | mean |")
    console.print("| --- | " + " | ".join("---" for _ in names) + " | --- | --- |")
    for m in models:
        r = [rate(m, w) for w in names]
        console.print(f"| {m} | " + " | ".join(_rate(res[m][w]) for w in names) +
                      f" | {100 * min(r):.1f}% | {100 * sum(r) / len(r):.1f}% |")  # fmt: skip
    for w in names:
        t = paired_test(res["base"][w].passed, res[w][w].passed)
        console.print(f"specialist {w} on its world: {100 * (rate(w, w) - rate('base', w)):+.1f} points over the base, "
                      f"McNemar p={t['p']:.2g} ({t['b_only']:.0f} only the specialist passes, {t['a_only']:.0f} only "
                      "the base)")  # fmt: skip
    if specialists_only:
        return
    for a in GRID:
        m = f"merge {a}"
        parts = []
        for w in names:
            gain = rate(w, w) - rate("base", w)
            kept = (rate(m, w) - rate("base", w)) / gain if gain > 0 else float("nan")
            t = paired_test(res[w][w].passed, res[m][w].passed)
            parts.append(f"{w} keeps {kept:.0%} of the specialist's gain (vs specialist p={t['p']:.2g})")
        console.print(f"{m}: " + "; ".join(parts))
    best = max((f"merge {a}" for a in GRID), key=lambda m: (min(rate(m, w) for w in names), -abs(float(m[6:]) - 0.5)))
    worse = min(names, key=lambda w: rate(best, w))
    t = paired_test(res["joint"][worse].passed, res[best][worse].passed)
    console.print(f"kept by the worst world's score: {best}; on its worse world ({worse}) it scores "
                  f"{100 * (rate(best, worse) - rate('joint', worse)):+.1f} points against joint RL, McNemar "
                  f"p={t['p']:.2g} ({t['b_only']:.0f} only the merge passes, {t['a_only']:.0f} only joint)")  # fmt: skip


if __name__ == "__main__":
    app()
