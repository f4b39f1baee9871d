"""Sandbox speed: environment steps per second per core with the text observation, and screenshot rendering.

Workload: a mix of tasks over every family and level; the expert's actions are recorded once, then replayed
on fresh environments, timing reset + every step (each step parses the action, updates the screen and builds
the text observation). One process, one thread: the rate is per core.

Baselines, measured in the same run:
- steps: a trivial Python loop that parses the same strings the same number of times, uncached (the least any
  environment using the grammar must do per step; `parse_action` remembers short strings, which the environment
  loop keeps). Target: 2,000 steps/s/core absolute, written as
  the ratio to that loop that reaches it.
- screenshots: Pillow encoding a blank frame of the same size as PNG (the floor for producing any PNG).
"""

from __future__ import annotations

import io
import time

from PIL import Image

from bench.common import Figure, quick
from sandbox.demonstrators import Expert
from sandbox.env import Env
from sandbox.families import FAMILIES, LEVELS
from sandbox.render import render_png
from sandbox.tasks import Task, make_task
from schemas.actions import _parse as parse_uncached  # the baseline: parse_action remembers strings


def _workload(seeds: int) -> list[tuple[Task, list[str]]]:
    out = []
    for fam in FAMILIES:
        for lvl in LEVELS:
            for s in range(seeds):
                t = make_task(fam, lvl, 10_000 + s)
                env, ex = Env(t), Expert()
                ex.reset(t)
                acts = []
                while not env.done:
                    acts.append(ex.act(env).action)
                    env.step(acts[-1])
                out.append((t, acts))
    return out


def _rate(fn, n_items: int, min_s: float) -> float:
    best = 0.0
    t_end = time.perf_counter() + min_s
    while True:
        t0 = time.perf_counter()
        fn()
        best = max(best, n_items / (time.perf_counter() - t0))
        if time.perf_counter() > t_end:
            return best


def run() -> list[Figure]:
    work = _workload(2 if quick() else 8)
    n_steps = sum(len(a) for _, a in work)
    min_s = 0.5 if quick() else 3.0

    def env_loop() -> None:
        for t, acts in work:
            env = Env(t)
            for a in acts:
                env.step(a).observation.text  # noqa: B018 - the text observation is part of the step

    def parse_loop() -> None:
        for _, acts in work:
            for a in acts:
                parse_uncached(a)

    env_rate = _rate(env_loop, n_steps, min_s)
    parse_rate = _rate(parse_loop, n_steps, min_s)

    envs = [Env(t) for t, _ in work[:: 3 if quick() else 1]]
    blank = Image.new("RGB", (envs[0].screen.width, envs[0].screen.height), (246, 247, 249))

    def shots() -> None:
        for e in envs:
            render_png(e.screen)

    def blank_png() -> None:
        for _ in envs:
            blank.save(io.BytesIO(), format="PNG", compress_level=6)

    shot_rate = _rate(shots, len(envs), min_s)
    blank_rate = _rate(blank_png, len(envs), min_s)
    return [
        Figure("env steps/s/core, text observation (incl. reset)", env_rate, parse_rate, "steps/s",
               target=round(2000 / parse_rate, 4),
               note=f"{n_steps} steps over {len(work)} tasks; baseline: the same actions parsed alone, uncached; "
                    "target = 2,000 steps/s absolute"),
        Figure("screenshots/s/core (draw + PNG, 640x400)", shot_rate, blank_rate, "frames/s",
               note="baseline: Pillow PNG-encoding a blank frame; rendering is optional per step"),
    ]  # fmt: skip
