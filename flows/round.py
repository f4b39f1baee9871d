"""The `flywheel-round` Prefect flow: one round, stage by stage, one round at a time, resumable.

Thin tasks over flows/stages.py (the one round engine: `flywheel round run`, the deployments of prefect.yaml and
`flywheel demo` all run this flow). The flow holds the lake's round lock (storage/lock.py) for its whole run and
writes the running stage into it, so a second start says which round and stage are running and since when.
Training stages run in-process by default; with `train_deployment` set they run as their own deployment
(`run_deployment`), so a data engineer can send them to a GPU work pool. Stages that only do lake I/O retry;
training stages do not (a retry would train twice — a failed round is resumed instead).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from core.settings import get_settings
from flows.config import RoundConfig, resolve_config, resolve_landing
from flows.stages import (
    TRAIN_STAGES,
    Progress,
    RoundContext,
    RoundStateError,
    next_round,
    pending_stages,
    record_config,
    round_state,
    run_stage,
)
from storage.lake import Lake
from storage.lock import LakeLock

_RETRIES = {"intake": 2, "route": 2, "summary": 2}


def _ctx(lake: str, round: int, landing: str | None, cfg: RoundConfig | None, progress: Progress | None = None,
         dashboard: str | None = None, end_by: float | None = None) -> RoundContext:  # fmt: skip
    kw = {"progress": progress} if progress else {}
    return RoundContext(Lake.open(lake), round, Path(landing or get_settings().landing), cfg or RoundConfig(),
                        dashboard=Path(dashboard) if dashboard else None, end_by=end_by, **kw)  # fmt: skip


def _publish_summary(round: int) -> Callable[[dict[str, Any]], None]:
    def publish(info: dict[str, Any]) -> None:
        link = f"\n\nDashboard: file://{info['dashboard']}" if info.get("dashboard") else ""
        create_markdown_artifact(
            info["markdown"] + link, key=f"flywheel-round-{round}", description=f"Flywheel round {round}"
        )

    return publish


@task(task_run_name="round {round}: {stage}", cache_policy=NO_CACHE)
def stage_task(
    lake: str, round: int, stage: str, landing: str | None, cfg: RoundConfig | None, dashboard: str | None,
    progress: Progress | None = None, end_by: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One stage; the summary stage also publishes the round's markdown artifact (part of the stage, so a Prefect
    API that is down when it is published fails the stage, and the task's retries ride out a short outage)."""
    publish = _publish_summary(round) if stage == "summary" else None
    info = run_stage(_ctx(lake, round, landing, cfg, progress, dashboard, end_by), stage, publish)
    get_run_logger().info("round %s: %s done %s", round, stage, {k: v for k, v in info.items() if k != "markdown"})
    return info


def _acting_processes(cfg: RoundConfig, todo: list[str]) -> int:
    """The most processes the round's pending acting stages (sample, annotate, evaluate) will act with
    (`training.procs.acting_processes`): helpers are warmed only when a stage will use them, not for a tiny round's
    few tasks, nor for a backend whose tasks share a browser pool (they act in-process)."""
    from training.procs import acting_processes, pooled

    acting = [s for s in ("sample", "annotate", "evaluate") if s in todo]
    if not acting:
        return 1
    f, heldout = cfg.flywheel, cfg.backend.heldout_tasks(cfg.eval_per_cell)
    if pooled(heldout):
        return 1
    sizes = {"sample": (f.sampling.tasks, f.sampling.processes), "annotate": (cfg.annotate_tasks, f.eval.processes),
             "evaluate": (len(heldout), f.eval.processes)}  # fmt: skip
    return max(acting_processes(*sizes[s]) for s in acting)


@flow(name="train-stage")
def train_stage(
    lake: str, round: int, stage: str, landing: str | None = None, cfg: RoundConfig | None = None
) -> dict[str, Any]:
    """One training stage of a round, as its own flow: the deployment a GPU work pool can pick up."""
    if stage not in TRAIN_STAGES:
        raise ValueError(f"{stage!r} is not a training stage ({', '.join(TRAIN_STAGES)})")
    lk = Lake.open(lake)
    cfg = cfg or resolve_config(lk)[0]  # the configuration the round recorded when it started
    return run_stage(_ctx(lake, round, resolve_landing(lk, landing), cfg), stage)


def _run_training_deployment(name: str, lake: str, round: int, stage: str, landing: str | None) -> dict[str, Any]:
    from prefect.deployments import run_deployment

    fr = run_deployment(name=name, parameters={"lake": lake, "round": round, "stage": stage, "landing": landing})
    if not fr.state or not fr.state.is_completed():
        raise RuntimeError(
            f"training deployment {name} ended {fr.state.name if fr.state else 'without a state'} in round {round} stage {stage}"
        )
    return fr.state.result()


@flow(name="flywheel-round")
def flywheel_round(
    lake: str | None = None,
    round: int | None = None,
    resume: bool = False,
    landing: str | None = None,
    cfg: RoundConfig | None = None,
    dashboard: str | None = None,
    train_deployment: str | None = None,
    config: str | None = None,
    env: str | None = None,
    people: str | None = None,
    progress: Progress | None = None,
    end_by: float | None = None,
    within_min: float | None = None,
) -> dict[str, Any]:
    """Run round `round` (default: the next one), or with resume=True finish it from its first stage not done.

    The round's configuration: `cfg` (in-process callers), else `config` (a JSON/TOML file) and/or `env` / `people`
    (for deployments), else the one the lake's last round recorded, else the defaults (flows.config.resolve_config).
    `end_by` (time.time()): the round's SFT stops early enough for the round to end by then (flows.budget.sft_stop_at);
    `within_min`, for a schedule: the same end, that many minutes after the flow starts (`end_by` wins if both).
    """
    logger = get_run_logger()
    if end_by is None and within_min is not None:
        end_by = time.time() + 60 * float(within_min)
    if end_by is not None:
        logger.info("the round is to end by %s: its SFT stops early enough for the stages after it",
                    time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(end_by)))  # fmt: skip
    lake = lake or get_settings().lake
    lk = Lake.open(lake, create=True)
    if cfg is None:
        cfg, where = resolve_config(lk, config, env, None, people)
        logger.info("round configuration from %s (env %s, people %s)", where, cfg.env, cfg.people)
    landing = resolve_landing(lk, landing)
    lock = LakeLock(lk, "round", what="a round (starting)")
    with lock:
        r = _pick_round(lk, round, resume)
        record_config(lk, r, cfg, Path(landing))
        todo = pending_stages(lk, r, cfg)
        logger.info("round %s: stages to run: %s", r, ", ".join(todo) or "none")
        if (n := _acting_processes(cfg, todo)) > 1:
            from training.procs import warm_helpers

            warm_helpers(n)  # their start runs beside the first stages, not in an evaluation
        out: dict[str, Any] = {"round": r, "stages": {}}
        for stage in todo:
            lock.update(f"round {r} (stage {stage})")
            if stage in TRAIN_STAGES and train_deployment:
                info = _run_training_deployment(train_deployment, lake, r, stage, landing)
            else:
                t = stage_task.with_options(retries=_RETRIES.get(stage, 0), retry_delay_seconds=[2, 10])
                info = t(lake, r, stage, landing, cfg, dashboard, progress, end_by)
            out["stages"][stage] = {k: v for k, v in info.items() if k != "markdown"}
        return out


class PrefectAPIDown(ValueError):
    """The Prefect API stopped answering (after the client's retries) while a round ran: a one-line CLI error."""


def prefect_api_failure(e: BaseException) -> str | None:
    """`Type: message` of the Prefect API failure at the root of `e` (a request to PREFECT_API_URL that could not
    connect, timed out or got a 5xx after the client's retries), or None when `e` is something else."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    api = (PREFECT_API_URL.value() or "").rstrip("/")
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen and api:
        seen.add(id(x))
        if isinstance(x, httpx.TransportError) or (
            isinstance(x, httpx.HTTPStatusError) and x.response.status_code >= 500
        ):
            try:
                url = str(x.request.url)
            except RuntimeError:  # an httpx error raised without its request
                url = ""
            if url.startswith(api):
                return f"{type(x).__name__}: {x}"
        x = x.__cause__ or x.__context__
    return None


def _pick_round(lk: Lake, round: int | None, resume: bool) -> int:
    """The round to run: `round`, or the next one; refuses a finished round, a resume of one not started and a run
    of one already started (with the command that fits)."""
    if resume:
        if round is None:
            raise RoundStateError("resume needs a round: flywheel round resume R")
        state = round_state(lk, round)
        if state == "new" and round != next_round(lk):  # a crash before the first stage was recorded: start it
            raise RoundStateError(f"round {round} has not started; use `flywheel round run --round {round}`")
        if state == "done":
            raise RoundStateError(f"round {round} is already finished; nothing to resume")
        return round
    if round is None:
        return next_round(lk)
    state = round_state(lk, round)
    if state != "new":
        hint = "nothing to do" if state == "done" else f"resume it with `flywheel round resume {round}`"
        raise RoundStateError(f"round {round} has already {'finished' if state == 'done' else 'started'}; {hint}")
    return round


@flow(name="ingest-landing")
def ingest_landing(lake: str | None = None, landing: str | None = None) -> dict[str, Any]:
    """Ingest whatever is in the landing area now (all three sources) as the next round's new episodes.

    Scheduled on a short interval in prefect.yaml, so uploads land between rounds; the round's own intake stage
    then finds nothing new. Idempotent like every ingest.
    """
    from flows.stages import intake_round, stage_intake

    lake = lake or get_settings().lake
    lk = Lake.open(lake, create=True)
    r = intake_round(lk)
    info = stage_intake(RoundContext(lk, r, Path(landing or get_settings().landing), RoundConfig()))
    get_run_logger().info("landing ingested as round %s: %s", r, info)
    return {"round": r, **info}
