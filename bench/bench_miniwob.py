"""MiniWoB++ in headless Chromium: episodes/s per environment with screenshots, pool scaling, and the scripted
demonstrators' success per task on held-out seeds.

Figures (each against a baseline measured in the same run):
- episodes/s per env, screenshots on: our MiniwobEnv running the scripted expert (text observation + PNG
  screenshot at every step, real input events) vs. the `miniwob` package's own gymnasium environment replaying
  the very same actions on the same seeds (its observation: DOM list + numpy screenshot). Both exclude browser
  start-up. use-autocomplete is left out of this pair: its wait() pauses (0.5 s) would dominate both sides.
- pool episodes/s: a BrowserPool of 2 browsers vs. the single env above (2 cores: at most 2x).
- success per task: the expert on held-out seeds vs. the novice (p_mistake 0.25) on the same seeds
  (BENCH_MINIWOB_HELDOUT seeds per task, 30 by default; make bench: 15).
"""

from __future__ import annotations

import os
import time

from bench.common import Figure, console, quick
from sandbox.miniwob import TASKS, BrowserPool, Expert, MiniwobEnv, Novice, TaskSpec, heldout_specs, run_episode
from schemas.actions import parse_action

_KEYS = {
    "enter": "<Enter>",
    "ctrl a": "C-a",
    "tab": "<Tab>",
    "backspace": "<Backspace>",
    "down": "<ArrowDown>",
    "up": "<ArrowUp>",
}


def _to_miniwob(env, a: str):
    from miniwob.action import ActionTypes

    p = parse_action(a)
    if p.kind == "click":
        return env.unwrapped.create_action(ActionTypes.CLICK_COORDS, coords=[float(p.x), float(p.y)])
    if p.kind == "type":
        return env.unwrapped.create_action(ActionTypes.TYPE_TEXT, text=p.text)
    if p.kind == "hotkey":
        keys = env.unwrapped.action_space_config.allowed_keys
        return env.unwrapped.create_action(ActionTypes.PRESS_KEY, key=keys.index(_KEYS[p.key]))
    raise ValueError(f"no MiniWoB action for {a}")


def _ours(specs: list[TaskSpec]) -> tuple[float, list[list[str]], int]:
    env = MiniwobEnv(specs[0], screenshots=True, reset=False)
    try:
        env.reset(specs[0])  # browser start-up, not timed
        expert = Expert()
        t0 = time.perf_counter()
        attempts = [run_episode(env, s, expert) for s in specs]
        dt = time.perf_counter() - t0
    finally:
        env.close()
    return len(specs) / dt, [[st.action for st in a.steps] for a in attempts], sum(a.passed for a in attempts)


def _baseline(specs: list[TaskSpec], actions: list[list[str]]) -> tuple[float, int]:
    import gymnasium
    import miniwob

    from sandbox.miniwob.browser import configure_offline

    configure_offline()
    gymnasium.register_envs(miniwob)
    envs = {}
    try:
        for s in specs:  # one browser per task, started before timing
            if s.name not in envs:
                envs[s.name] = gymnasium.make(f"miniwob/{s.name}-v1")
                envs[s.name].reset(seed=0)
        t0 = time.perf_counter()
        passed = 0
        for s, acts in zip(specs, actions):
            env = envs[s.name]
            env.reset(seed=s.seed)
            r = 0.0
            for a in acts:
                _, r, done, _, _ = env.step(_to_miniwob(env, a))
                if done:
                    break
            passed += int(r > 0)
        dt = time.perf_counter() - t0
    finally:
        for e in envs.values():
            e.close()
    return len(specs) / dt, passed


def run() -> list[Figure]:
    per = 3 if quick() else 12
    names = [n for n in TASKS if n != "use-autocomplete"]
    specs = [TaskSpec(n, 500 + i) for i in range(per) for n in names]

    ours, actions, ok_ours = _ours(specs)
    base, ok_base = _baseline(specs, actions)
    figs = [
        Figure("episodes/s per env, screenshots on (expert, 11 tasks)", ours, base, "ep/s", target=0.5,
               note=f"{len(specs)} episodes, {sum(map(len, actions))} steps, passed {ok_ours}; baseline: miniwob's gymnasium "
                    f"env replaying the same actions (passed {ok_base})"),
    ]  # fmt: skip

    t0 = time.perf_counter()
    with BrowserPool(size=2) as pool:
        pool.run(specs[:2], Expert, progress=False)  # start both browsers, not timed
        t0 = time.perf_counter()
        pool.run(specs, Expert, progress=False)
        pool_rate = len(specs) / (time.perf_counter() - t0)
        figs.append(
            Figure("pool episodes/s, 2 browsers", pool_rate, ours, "ep/s", target=1.2, note="baseline: one env (above)")
        )

        held = heldout_specs(per_task=5 if quick() else int(os.environ.get("BENCH_MINIWOB_HELDOUT", "30")))
        t0 = time.perf_counter()
        ex = pool.run(held, Expert, progress=True, label="expert, held-out")
        t_ex = time.perf_counter() - t0
        nov = pool.run(held, lambda: Novice(p_mistake=0.25), progress=True, label="novice, held-out")
        net = pool.net_attempts
    console.print(f"held-out expert run: {len(held)} episodes in {t_ex:.1f} s ({len(held) / t_ex:.2f} ep/s with 2 browsers); "
                  f"outside requests: {len(net)}")  # fmt: skip
    from rich.table import Table

    tab = Table(
        "task", "expert %", "novice %", "steps/ep (expert)", "seeds", title="scripted demonstrators on held-out seeds"
    )
    for name in TASKS:
        e = [a for a in ex if a.task.family == name]
        n = [a for a in nov if a.task.family == name]
        tab.add_row(name, f"{100 * sum(a.passed for a in e) / len(e):.0f}", f"{100 * sum(a.passed for a in n) / len(n):.0f}",
                    f"{sum(len(a.steps) for a in e) / len(e):.1f}", str(len(e)))  # fmt: skip
    console.print(tab)
    se, sn = 100 * sum(a.passed for a in ex) / len(ex), 100 * sum(a.passed for a in nov) / len(nov)
    figs.append(Figure(f"expert success % on held-out seeds ({len(TASKS)} tasks)", se, sn, "%",
                       note=f"{len(held)} episodes; baseline: novice (p_mistake 0.25) on the same seeds; per task above"))  # fmt: skip
    return figs
