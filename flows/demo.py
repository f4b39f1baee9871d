"""Prefect flow `flywheel_demo`: a cold start from demonstrator data, then N flywheel rounds.

Thin tasks over training/demo.py; lake I/O tasks retry, training tasks do not (a retry would train twice).
Progress goes to a callback so the CLI can draw it; the flow returns the rounds table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from storage.lake import Lake
from training import demo as D
from training.envs import close_backends


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def cold_start_task(lake: str, landing: str, cfg: D.DemoConfig, say: D.Say) -> dict[str, Any]:
    return D.cold_start_data(Lake.open(lake), Path(landing), cfg, say)


@task(retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def route_task(lake: str, round: int) -> dict[str, Any]:
    return D.route(Lake.open(lake), round)


@task(retries=1, retry_delay_seconds=2, cache_policy=NO_CACHE)
def sample_task(lake: str, round: int, landing: str, cfg: D.DemoConfig, on_step: Any = None) -> dict[str, Any]:
    return D.sample_round(Lake.open(lake), round, Path(landing), cfg, on_step)


@task(retries=1, retry_delay_seconds=2, cache_policy=NO_CACHE)
def annotate_task(lake: str, round: int, landing: str, cfg: D.DemoConfig, on_step: Any = None) -> dict[str, Any]:
    return D.annotate(Lake.open(lake), round, Path(landing), cfg, on_step)


@task(cache_policy=NO_CACHE)
def train_task(lake: str, round: int, cfg: D.DemoConfig, on_step: Any = None) -> list[dict[str, Any]]:
    return D.train_round(Lake.open(lake), round, cfg, on_step)


@task(retries=1, retry_delay_seconds=2, cache_policy=NO_CACHE)
def evaluate_task(lake: str, round: int, cfg: D.DemoConfig, on_step: Any = None) -> dict[str, Any]:
    return D.evaluate_round(Lake.open(lake), round, cfg, on_step)


@flow(name="flywheel_demo")
def flywheel_demo(
    lake: str, rounds: int = 3, cfg: D.DemoConfig | None = None, say: D.Say | None = None
) -> list[dict[str, Any]]:
    """Cold start (round 0), then `rounds` rounds of sample -> annotate (when on) -> route -> CT when due -> SFT -> RL
    -> evaluate, in the environment backend `cfg.env` (the sandbox, or MiniWoB++ in a browser pool closed when the
    flow ends)."""
    cfg = cfg or D.DemoConfig()
    say = say or D._quiet
    Lake.open(lake, create=True)
    landing = str(D.landing_for(lake))
    try:
        for r in range(rounds + 1):
            if r == 0:
                t = time.perf_counter()
                say("stage", {"round": 0, "stage": "ingest", "info": cold_start_task(lake, landing, cfg, say)})
                D.record_stage(Lake.open(lake), 0, "ingest", t)
            else:
                t = time.perf_counter()
                info = sample_task(
                    lake, r, landing, cfg, lambda n, r=r: say("tick", {"round": r, "stage": "sample", "n": n})
                )
                D.record_stage(Lake.open(lake), r, "sample", t)
                say("stage", {"round": r, "stage": "sample", "info": info})
                if cfg.annotate_tasks:
                    t = time.perf_counter()
                    info = annotate_task(
                        lake, r, landing, cfg, lambda n, r=r: say("tick", {"round": r, "stage": "annotate", "n": n})
                    )
                    D.record_stage(Lake.open(lake), r, "annotate", t)
                    say("stage", {"round": r, "stage": "annotate", "info": info})
            t = time.perf_counter()
            say("stage", {"round": r, "stage": "route", "info": route_task(lake, r)})
            D.record_stage(Lake.open(lake), r, "route", t)
            t = time.perf_counter()
            jobs = train_task(
                lake, r, cfg, lambda s, i, loss, r=r: say("tick", {"round": r, "stage": s, "i": i, "loss": loss})
            )
            D.record_stage(Lake.open(lake), r, "train", t)
            say("stage", {"round": r, "stage": "train", "info": jobs})
            t = time.perf_counter()
            ev = evaluate_task(lake, r, cfg, lambda n, r=r: say("tick", {"round": r, "stage": "eval", "n": n}))
            D.record_stage(Lake.open(lake), r, "eval", t)
            say("stage", {"round": r, "stage": "eval", "info": ev})
    finally:
        close_backends()  # the browsers of --env miniwob
    return D.rounds_table(Lake.open(lake))
