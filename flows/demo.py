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
from training.demo import ColdStart, claim_landing, landing_for, write_cold_start
from training.envs import close_backends
from validators.rounds import RoundRecord, read_round, read_rounds, update_round


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def cold_start_task(lake: str, landing: str, cfg: RoundConfig, cold: ColdStart, say: Progress) -> dict[str, Any]:
    return write_cold_start(Lake.open(lake), Path(landing), cfg.backend, cold, cfg.seed,
                            lambda what: say("cold", {"round": 0, "what": what}))  # fmt: skip


def _sft_runs(lk: Lake) -> dict[int, tuple[int, int]]:
    """Round -> (SFT pile examples, SFT steps) of the rounds' SFT jobs (training_runs)."""
    import pyarrow.compute as pc

    t = lk.read("training_runs", ["round", "samples", "steps"], filter=pc.field("stage") == "sft")
    return {
        int(r): (int(n), int(k)) for r, n, k in zip(*(t.column(c).to_pylist() for c in ("round", "samples", "steps")))
    }


def _fit_round(
    lk: Lake, cfg: RoundConfig, now: RoundConfig, r: int, budget_min: float, started: float, rounds: int, say: Progress
) -> RoundConfig:
    """Round `r`'s configuration under the budget (`cfg` unscaled, `now` the one the round before ran with): round 1's
    from round 0's measured stages (`refit`), each later one's from the round before it (`correct`). Each decision
    is recorded in the round's breakdown (`budget`: the SFT scale, and the search's seconds when the SFT floor did
    not fit); a re-run of the demo reuses it. The last round's SFT keeps its full step cap: the clock stops it
    (`flows.budget.sft_stop_at`), so it trains for what the rounds before left, neither more nor less."""
    from flows.budget import correct, refit, scaled

    rec = read_round(lk, r)
    done = rec.breakdown.get("budget") if rec else None
    last = r == rounds
    if done:
        return scaled(cfg, 1.0 if last else float(done["scale"]), done.get("search_s"))
    elapsed = (time.time() - started) / 60
    prev = read_round(lk, r - 1)
    if r == 1:
        fitted_cfg, fitted = refit(cfg, budget_min, elapsed, prev.stages if prev else {}, rounds)
    else:
        runs = _sft_runs(lk)
        if prev is None or r - 1 not in runs:  # nothing measured to correct from
            return now
        piles = [runs[k][0] for k in sorted(runs) if k < r]
        searched = (prev.breakdown.get("budget") or {}).get("search_s")  # the round before's, where it was cut
        fitted_cfg, fitted = correct(
            cfg, budget_min, elapsed, r - 1, prev.stages, runs[r - 1][1], piles, rounds - r + 1, searched
        )
    update_round(lk, r, breakdown={"budget": fitted.as_dict()})
    say("budget", {"round": r, "why": fitted.why()})
    return scaled(cfg, 1.0, fitted_cfg.flywheel.search.time_budget_s) if last else fitted_cfg


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
    round 0's breakdown. With `budget_min`, the later rounds' SFT (then their search's seconds) is sized after round
    0, and again after each later round, to what is left of it since `started` (time.time(); flows/budget.py), and
    the last round's SFT stops by the clock so that the run ends within it. Returns the rounds table."""
    cfg = base = replace(cfg or RoundConfig(), people="scripted")
    started = started or time.time()
    say = say or (lambda event, info: None)
    lk = Lake.open(lake, create=True)
    landing = str(landing_for(lake))
    fresh = round_state(lk, 0) == "new"
    moved = claim_landing(Path(landing), lk.delta("episodes").metadata().id, lake_started=not fresh)
    if moved is not None:
        say("landing", {"round": 0, "landing": landing, "moved": str(moved)})
    if notes and fresh:
        update_round(lk, 0, breakdown=notes)
    try:
        cold_start_task(lake, landing, cfg, cold or ColdStart(), say)
        for r in range(rounds + 1):
            state = round_state(lk, r)
            if state != "done":
                if r >= 1 and budget_min:
                    cfg = _fit_round(lk, base, cfg, r, budget_min, started, rounds, say)
                end_by = None
                if r == rounds and r >= 1 and budget_min:  # the last round's SFT stops by the clock (flows/budget.py)
                    from flows.budget import MARGIN

                    end_by = started + budget_min * 60 * MARGIN
                flywheel_round(lake=lake, round=r, resume=state == "incomplete", landing=landing, cfg=cfg, progress=say,
                               end_by=end_by)  # fmt: skip
    finally:
        close_backends()  # the browsers of --env miniwob
    return read_rounds(Lake.open(lake))
