"""Prefect flow `flywheel_demo`: the demo is a configuration of the one round engine, not an engine of its own.

A cold start (the backend's scripted demonstrators write round 0's upload files into the landing area), then rounds
0..N of the `flywheel-round` flow with `people="scripted"`: exactly what `flywheel round run --people scripted`
runs, so the round shown to learn is the round a data engineer schedules. Rounds already finished are skipped and an
interrupted one is resumed, so re-running the demo on its lake continues it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.config import RoundConfig
from flows.round import flywheel_round
from flows.stages import Progress, round_state
from storage.lake import Lake
from training.demo import ColdStart, landing_for, write_cold_start
from training.envs import close_backends
from validators.rounds import RoundRecord, read_round, read_rounds, update_round


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def cold_start_task(lake: str, landing: str, cfg: RoundConfig, cold: ColdStart, say: Progress) -> dict[str, Any]:
    return write_cold_start(Lake.open(lake), Path(landing), cfg.backend, cold, cfg.seed,
                            lambda what: say("cold", {"round": 0, "what": what}))  # fmt: skip


def _fit_later_rounds(
    lk: Lake, cfg: RoundConfig, budget_min: float, started: float, rounds: int, say: Progress
) -> RoundConfig:
    """Rounds 1.. sized to the budget from round 0's measured stages (decided once: a re-run reuses round 1's
    recorded decision)."""
    from flows.budget import refit, scaled

    rec1 = read_round(lk, 1)
    done = rec1.breakdown.get("budget") if rec1 else None
    if done:
        return scaled(cfg, float(done["scale"]))
    r0 = read_round(lk, 0)
    later, fitted = refit(cfg, budget_min, (time.time() - started) / 60, r0.stages if r0 else {}, rounds)
    update_round(lk, 1, breakdown={"budget": fitted.as_dict()})
    say("budget", {"round": 1, "why": fitted.why()})
    return later


@flow(name="flywheel_demo")
def flywheel_demo(
    lake: str,
    rounds: int = 3,
    cfg: RoundConfig | None = None,
    cold: ColdStart | None = None,
    say: Progress | None = None,
    notes: dict[str, Any] | None = None,
    budget_min: float | None = None,
    started: float | None = None,
) -> list[RoundRecord]:
    """Cold start, then rounds 0..`rounds` of the round engine with the scripted people, in the environment backend
    `cfg.env` (a MiniWoB++ browser pool is closed when the flow ends). `notes` (how the run was sized) go into
    round 0's breakdown. With `budget_min`, the later rounds' SFT is sized after round 0 to what is left of it
    since `started` (time.time(); flows/budget.py). Returns the rounds table."""
    cfg = replace(cfg or RoundConfig(), people="scripted")
    say = say or (lambda event, info: None)
    lk = Lake.open(lake, create=True)
    landing = str(landing_for(lake))
    if notes and round_state(lk, 0) == "new":
        update_round(lk, 0, breakdown=notes)
    try:
        cold_start_task(lake, landing, cfg, cold or ColdStart(), say)
        for r in range(rounds + 1):
            if r == 1 and budget_min:
                cfg = _fit_later_rounds(lk, cfg, budget_min, started or time.time(), rounds, say)
            state = round_state(lk, r)
            if state != "done":
                flywheel_round(lake=lake, round=r, resume=state == "incomplete", landing=landing, cfg=cfg, progress=say)
    finally:
        close_backends()  # the browsers of --env miniwob
    return read_rounds(Lake.open(lake))
