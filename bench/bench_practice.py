"""Does practice pay? From one checkpoint, three arms on the same 280 held-out tasks (every family and level):

  (a) no more training;
  (b) SFT continued on the copying data for the wall time practice takes;
  (c) practice: fresh tasks solved by search with the verifier's outcome in a worker process, the learner imitating
      what was found beside a share of the copying data (training/search_practice.py), BENCH_PRACTICE_S seconds
      (480 unless set).

The checkpoint is the demo's own round 0 (`round0_start`: the cold start's files through the round engine, the
routed SFT pile as the copying data), so (c) is also "practice alone": practice from the round-0 checkpoint with no
new human data. The scratch benches (copying_arms, merge_arms, `sweep`) keep `cold_start`, an equivalent trained on
490 expert episodes (about 2 points higher), which their documented tables started from. The issue gives practice alone
10 minutes, and (b) and (c) at most 8, so (c) then goes on for BENCH_PRACTICE_ALONE_S in all (600 unless set; a
second cycle on fresh tasks, seed 1) and practice alone is measured there. The figures are the rates with 95%
intervals, per level, and exact McNemar tests of (c) against (a) and (b) on the same tasks; the gain target is the
report's +8.7 points. Policy-gradient RL (training/rl.py) is measured by `sweep` (below): in 20-odd settings
it never beat copying here (docs/training.md, "Practice"). BENCH_QUICK=1 shrinks everything to a smoke run whose
numbers mean nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from dataclasses import replace

from bench.common import Figure, console, quick, shared_folder

GAIN_TARGET = 8.7  # points: UI-TARS-2's RL gain over SFT on phone tasks


def budget_s() -> float:
    return 20.0 if quick() else float(os.environ.get("BENCH_PRACTICE_S", "480"))


def alone_s() -> float:
    """Practice alone's whole budget (arm (c)'s included): the issue's 10 minutes."""
    return 30.0 if quick() else float(os.environ.get("BENCH_PRACTICE_ALONE_S", "600"))


def _levels(r) -> str:
    return ", ".join(f"L{k} {v.rate:.1%}" for k, v in sorted(r.by_level.items()))


def _rate(r) -> str:
    o = r.overall
    return f"{o.rate:.1%} [{o.lo:.1%}, {o.hi:.1%}]"


def cold_start(folder: str | None = None):
    """The arms' common start: the shipped base after the cold start's SFT on 490 expert episodes (round 0's
    equivalent), with the expert examples (arm b continues on them). Saved in `folder` and loaded from it when it
    is there already (a sweep of RL settings then trains it once); without `folder`, in a folder of this process's."""
    from bench.bench_training import _expert_items
    from flows.config import tuned_flywheel
    from training.base import sandbox_texts
    from training.model import Policy
    from training.sft import train_sft

    f = tuned_flywheel()
    folder = folder or _process_folder()
    if os.path.exists(os.path.join(folder, "config.json")):
        pol = Policy.load(folder)
        return pol, _expert_items(pol, 60 if quick() else 490, f.prompt)
    pol = Policy.create(sandbox_texts(200), f.model)
    items = _expert_items(pol, 60 if quick() else 490, f.prompt)
    cold = replace(f.cold_sft, steps=10 if quick() else f.cold_sft.steps)
    t0 = time.perf_counter()
    train_sft(pol, items, cold)
    console.print(
        f"practice: cold start SFT {cold.steps} steps on {len(items)} examples in {time.perf_counter() - t0:.0f} s"
    )
    pol.save(folder)
    return pol, items


def round0_start(folder: str | None = None):
    """The arms' common start in `make bench`: the demo's own round 0, the start the issue names (the cold start's
    files through the round engine: intake, route, SFT on the routed pile, evaluate; 28.6% held-out, the same in every
    demo run), with that round's SFT pile as the copying data (arm b continues on it, arm c rehearses it). Built
    once as a lake in `folder` (the run's shared folder under `python -m bench`) and read from it after."""
    lake = os.path.join(folder or _process_folder(), "round0-lake")
    if round0(lake) is None:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # as `flywheel demo` runs it
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        from flows.config import round_config
        from flows.demo import flywheel_demo
        from training.demo import ColdStart

        t0 = time.perf_counter()
        flywheel_demo(lake, 0, round_config(quick_sizes=quick(), people="scripted"),
                      ColdStart.quick() if quick() else ColdStart())  # fmt: skip
        console.print(f"practice: the demo's round 0 built in {time.perf_counter() - t0:.0f} s ({lake})")
    got = round0(lake)
    if got is None:
        raise RuntimeError(f"{lake}: the demo's round 0 ended without a checkpoint")
    return got["policy"], got["items"]


def round0(lake_uri: str) -> dict | None:
    """A lake's round-0 checkpoint, loaded, with the SFT pile's examples at the version it trained on; None when the
    lake has no finished round 0. A one-line ValueError when its checkpoint has no training_runs row."""
    import pyarrow.compute as pc

    from flows.config import tuned_flywheel
    from flows.stages import final_checkpoint, round_state
    from storage.lake import Lake
    from training.checkpoints import fetch
    from training.rl import rehearsal_items

    if not os.path.isdir(lake_uri) and "://" not in lake_uri:
        return None
    lake = Lake.open(lake_uri)
    if not lake.table_exists("rounds") or round_state(lake, 0) != "done":
        return None
    ck = final_checkpoint(lake, 0)  # round 0's, by its recorded stages
    if ck is None:
        return None
    row = lake.read("training_runs").filter(pc.equal(pc.field("output_checkpoint"), ck))
    if row.num_rows == 0:  # a checkpoint recorded in the stages but not by a training run: no pile version to take
        raise ValueError(f"{lake_uri}: round 0's checkpoint {ck} has no training_runs row to read its SFT pile from")
    pile_version = row["pile_version"][0].as_py()
    pol = fetch(lake, ck)
    items, _ = rehearsal_items(lake, pol, tuned_flywheel().prompt, 0, pile_version)
    return {"policy": pol, "items": items, "checkpoint": ck, "pile_version": pile_version}


_FOLDERS: dict[bool, str] = {}


def _process_folder() -> str:
    """Where the cold start is kept (one per quick mode): in the run's shared folder under `python -m bench`, whose
    modules each run in a process of their own (bench_training's generation figure starts from the same checkpoint,
    so it is trained once: 91 s here); else in a folder of this process's."""
    shared = shared_folder("cold-start-quick" if quick() else "cold-start")
    if shared:
        return shared
    if quick() not in _FOLDERS:
        _FOLDERS[quick()] = tempfile.mkdtemp(prefix="bench-cold-start-")
        atexit.register(shutil.rmtree, _FOLDERS[quick()], True)
    return _FOLDERS[quick()]


def rl_arm(policy, budget: float, items=None, families: tuple[str, ...] | None = None, **overrides):
    """Arm (c): RL from `policy` for at most `budget` seconds, RLConfig's practice settings with `overrides`;
    `items` (the copying data) feed the rehearsal loss when its coefficient is above 0; `families`: practise only
    those sandbox families' tasks (a specialist's world)."""
    from flows.config import tuned_flywheel
    from training.config import OptimConfig, RLConfig
    from training.envs import env_backend, known_good, training_tasks
    from training.rewards import verifier_reward
    from training.rl import train_rl

    f = tuned_flywheel()
    optim = overrides.pop("optim", None)
    cfg = replace(RLConfig(), **{"time_budget_s": budget, "iterations": 10_000, **overrides})
    if optim:
        cfg = replace(cfg, optim=OptimConfig(**{**cfg.optim.__dict__, **optim}))
    good = known_good(env_backend("sandbox"), training_tasks(4, 100_000, families))

    def on_iter(i: int, st: dict) -> None:
        console.print(f"practice: RL iter {i}: pass {st['pass_rate']:.2f} reward {st['reward_mean']:.2f} "
                      f"all-equal {st.get('all_equal_share', 0):.2f} entropy {st.get('entropy') or 0:.3f} "
                      f"kl {st.get('kl') or 0:.4f} clip {st.get('clip_low') or 0:.3f}/{st.get('clip_high') or 0:.3f} "
                      f"gen {st['gen_tokens_per_s']:,.0f} tok/s"
                      + (f" states {st['states']} found {st.get('explored_found', 0)} by search, "
                         f"{st.get('sampled_found', 0)} by sampling" if "states" in st else ""))  # fmt: skip

    t0 = time.perf_counter()

    def tasks(n: int, seed: int) -> list:
        return training_tasks(n, 100_000 + seed, families)

    _, info = train_rl(policy, tasks, verifier_reward(), cfg, f.prompt, f.max_new_tokens, on_iter=on_iter,
                       known_good=good, rehearsal=items)  # fmt: skip
    return info, time.perf_counter() - t0, cfg


def search_arm(policy, budget: float, items=None, families: tuple[str, ...] | None = None, **overrides):
    """Arm (c): practice by search and imitation from `policy` for `budget` seconds (the demo's settings,
    `flywheel.search`, with `overrides`); `items`: the copying data rehearsed beside what the search finds."""
    from flows.config import tuned_flywheel
    from training.envs import training_tasks
    from training.search_practice import train_by_search

    f = tuned_flywheel()
    cfg = replace(f.search, time_budget_s=budget, **overrides)

    def on_iter(i: int, st: dict) -> None:
        console.print(f"practice: search batch {i}: solved {st['solved']}/{st['tasks']} {st['solved_by_level']} "
                      f"in {st['search_s']:.1f} s, {st['examples']} examples ({st['found_total']} in all), "
                      f"{st['steps']} steps ({st['replayed_steps']} replayed), loss {st['loss'] or 0:.3f}, "
                      f"given up on {st['skipped']}" + (f", under the prior {st['guided']}" if st.get("guided") else ""))  # fmt: skip

    def tasks(n: int, seed: int) -> list:
        return training_tasks(n, 100_000 + seed, families)

    t0 = time.perf_counter()
    info = train_by_search(policy, tasks, cfg, f.prompt, rehearsal=items, on_iter=on_iter)
    return info, time.perf_counter() - t0, cfg


def run() -> list[Figure]:
    from core.stats import paired_test
    from flows.config import tuned_flywheel
    from training.data import batches
    from training.envs import heldout_tasks
    from training.evaluate import evaluate
    from training.loop import train_lm
    from training.model import Policy

    f = tuned_flywheel()
    B = budget_s()
    pol, items = round0_start()
    ho = heldout_tasks(1 if quick() else None)
    with tempfile.TemporaryDirectory() as d:
        pol.save(d)
        sft_pol, rl_pol = Policy.load(d), Policy.load(d)
    ra = evaluate(pol, ho, f.eval, f.prompt)
    console.print(f"practice: (a) no more training {_rate(ra)}")

    # (c) practice for B seconds: search in a worker, imitation in the learner
    info, rl_s, _ = search_arm(rl_pol, B, items)
    rc = evaluate(rl_pol, ho, f.eval, f.prompt)
    console.print(f"practice: (c) search + imitation {info['steps']} steps on {info['examples']} found examples "
                  f"({info['solved']} of {info['tasks']} tasks solved) in {rl_s:.0f} s: {_rate(rc)}")  # fmt: skip

    # (b) SFT continued on the copying data for the same wall time: the schedule's length from this machine's SFT
    # step time (flows.budget.calibrate; a fixed guess once ended the arm after 139 of RL's 243 s when steps got
    # faster), the loop's clock (OptimConfig.stop_at) ends it
    from flows.budget import calibrate
    from flows.config import RoundConfig

    sft_cfg = f.sft
    est = max(1, int(rl_s / calibrate(RoundConfig(flywheel=f))[0]))
    t0 = time.perf_counter()
    it = batches(items, sft_cfg.batch_size, est, sft_pol.tokenizer.pad_token_id, seed=7)
    losses, _ = train_lm(sft_pol.model, it, est, replace(sft_cfg.optim, stop_at=time.time() + rl_s))  # the loop's clock
    sft_s = time.perf_counter() - t0
    rb = evaluate(sft_pol, ho, f.eval, f.prompt)
    console.print(f"practice: (b) SFT {len(losses)} steps in {sft_s:.0f} s: {_rate(rb)}")

    # practice alone: (c) goes on to the 10 minutes, a second cycle on fresh tasks (seed 1)
    alone, alone_steps, rl2_s = rc, info["steps"], 0.0
    if alone_s() > rl_s + 1:
        info2, rl2_s, _ = search_arm(rl_pol, alone_s() - rl_s, items, seed=1)
        alone, alone_steps = evaluate(rl_pol, ho, f.eval, f.prompt), alone_steps + info2["steps"]
        console.print(f"practice: (c) continued {info2['steps']} steps in {rl2_s:.0f} s: {_rate(alone)}")
    vs_alone = paired_test(ra.passed, alone.passed)
    vs_a, vs_b = paired_test(ra.passed, rc.passed), paired_test(rb.passed, rc.passed)
    gain_a = 100 * (rc.overall.rate - ra.overall.rate)
    gain_b = 100 * (rc.overall.rate - rb.overall.rate)
    arms = (f"(a) none {_rate(ra)} ({_levels(ra)}); (b) SFT {len(losses)} steps {sft_s:.0f} s {_rate(rb)} "
            f"({_levels(rb)}); (c) practice {info['steps']} steps {rl_s:.0f} s {_rate(rc)} ({_levels(rc)}); "
            f"n={ra.overall.n}")  # fmt: skip
    return [
        Figure("practice gain over no more training (points)", gain_a, GAIN_TARGET, "points", target=1.0,
               note=f"McNemar exact p={vs_a['p']:.2g} (practice only {vs_a['b_only']:.0f}, none only {vs_a['a_only']:.0f}); {arms}"),
        Figure("practice gain over SFT for the same wall time (points)", gain_b, GAIN_TARGET, "points", target=1.0,
               note=f"McNemar exact p={vs_b['p']:.2g} (practice only {vs_b['b_only']:.0f}, SFT only {vs_b['a_only']:.0f}); budget {B:.0f} s"),
        Figure("practice alone from the cold start: held-out rate after / before", alone.overall.rate,
               max(ra.overall.rate, 1e-9), "rate", target=2.0,
               note=f"{rl_s + rl2_s:.0f} s of practice, {alone_steps} steps: (a) {_rate(ra)} -> {_rate(alone)} "
                    f"({_levels(alone)}); McNemar exact p={vs_alone['p']:.2g} ({vs_alone['b_only']:.0f} against "
                    f"{vs_alone['a_only']:.0f})"),
        Figure("practice: tasks solved by search per second", info["solved"] / max(rl_s, 1e-9), 1.0, "tasks/s",
               note=f"{info['solved']} of {info['tasks']} fresh tasks solved {info['solved_by_level']} of "
                    f"{info['tried_by_level']} tried by level; {info['examples']} examples; {info['steps']} steps "
                    f"({info['replayed_steps']} replayed, {info['alone_steps']} with no search out)"),
    ]  # fmt: skip


def sweep(overrides: dict, budget: float, folder: str) -> None:
    """One RL setting against the cached cold start: held-out before and after (the tables in docs/training.md,
    "Practice"). `python -m bench.bench_practice '{"algo": "grpo"}' 240 /tmp/practice-cold` (240 s of RL; an
    `"iterations"` override with a large budget runs a fixed number instead)."""
    from core.stats import paired_test
    from flows.config import tuned_flywheel
    from training.envs import heldout_tasks
    from training.evaluate import evaluate

    f = tuned_flywheel()
    pol, items = cold_start(folder)
    ho = heldout_tasks(None)
    before = evaluate(pol, ho, f.eval, f.prompt)
    info, rl_s, cfg = rl_arm(pol, budget, items, **overrides)
    after = evaluate(pol, ho, f.eval, f.prompt)
    p = paired_test(before.passed, after.passed)["p"]
    hist = info["iterations"]
    steps = sum(h.get("updates", 0) + h.get("rehearsal_while_waiting", 0) + h.get("rehearsal_steps", 0) for h in hist)
    console.print(f"practice sweep {overrides}: {len(hist)} iterations ({steps} optimiser steps) in {rl_s:.0f} s; held-out "
                  f"{_rate(before)} ({_levels(before)}) -> {_rate(after)} ({_levels(after)}), McNemar p={p:.2g}")  # fmt: skip


def alone_from_lake(lake_uri: str, cycle_s: float = 300.0, per_cell: int | None = None) -> dict:
    """Practice alone from a lake's own round-0 checkpoint, the start the issue names (the bench's cold start is an
    equivalent trained on 490 expert episodes, and scores about 2 points higher than the demo's round 0): the
    bench's two search cycles of `cycle_s` (seeds 0 and 1) with round 0's own SFT pile, at the version round 0
    trained on, as the rehearsal; held-out (`per_cell` tasks per family and level, all by default) before and after.
    `python -m bench.bench_practice alone ./lake-demo` (after `make demo`)."""
    from core.stats import paired_test
    from flows.config import tuned_flywheel
    from training.envs import heldout_tasks
    from training.evaluate import evaluate

    f, got = tuned_flywheel(), round0(lake_uri)
    if got is None:
        raise ValueError(f"{lake_uri} has no round-0 checkpoint to start from; run `flywheel demo` first")
    pol, items, ck, pile_version = got["policy"], got["items"], got["checkpoint"], got["pile_version"]
    ho = heldout_tasks(per_cell)
    before = evaluate(pol, ho, f.eval, f.prompt)
    console.print(f"practice alone from {ck} (round 0, SFT pile v{pile_version}: {len(items or [])} examples): "
                  f"before {_rate(before)}")  # fmt: skip
    steps, seconds = 0, 0.0
    for seed in (0, 1):
        info, s, _ = search_arm(pol, cycle_s, items, seed=seed)
        steps, seconds = steps + info["steps"], seconds + s
    after = evaluate(pol, ho, f.eval, f.prompt)
    test = paired_test(before.passed, after.passed)
    console.print(f"practice alone from round 0: {_rate(before)} -> {_rate(after)} ({_levels(after)}), "
                  f"{after.overall.rate / max(before.overall.rate, 1e-9):.2f}x in {seconds:.0f} s, {steps} steps; "
                  f"McNemar exact p={test['p']:.2g} ({test['b_only']:.0f} against {test['a_only']:.0f})")  # fmt: skip
    return {"before": before, "after": after, "steps": steps, "seconds": seconds, "checkpoint": ck,
            "pile_version": pile_version, "test": test}  # fmt: skip


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:2] == ["alone"]:
        alone_from_lake(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 300.0)
    else:
        sweep(json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
