"""A flywheel round as a list of stages, each a plain function over the lake, with its status kept in `rounds`.

    ingest -> route -> ct (when due) -> sft -> rl (when due) -> sample -> evaluate -> summary

Each stage's status (running / done / failed, start, end, seconds, outputs) is merged into the round's
`stage_status` JSON. A stage is idempotent: re-running it after a crash adds no row twice (appends are keyed by
content hashes), so `resume` simply runs every stage that is not `done`, in order. Training stages chain through
the checkpoints recorded in the status of the stage before them, never through "the newest checkpoint", so a
resumed round trains from exactly the base an uninterrupted one would have used.

Rejection sampling in round R uses R's final checkpoint and lands its attempts as round R+1's new episodes (the
newest model's attempts are validated in the next round, as in UI-TARS-2's loop).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from storage.lake import Lake
from training.demo import DemoConfig as RoundConfig
from training.pipeline import ct_due, train_steps

STAGES = ("ingest", "route", "ct", "sft", "rl", "sample", "evaluate", "summary")
TRAIN_STAGES = ("ct", "sft", "rl")

Progress = Callable[[str, dict[str, Any]], None]


def _quiet(event: str, info: dict[str, Any]) -> None:
    return None


class RoundStateError(ValueError):
    """A round asked for in a state that does not allow it (already finished, not started, ...)."""


@dataclass(frozen=True)
class RoundContext:
    lake: Lake
    round: int
    landing: Path
    cfg: RoundConfig
    progress: Progress = _quiet


# ------------------------------------------------------------------------------------------------ bookkeeping
def stage_status(lake: Lake, round: int) -> dict[str, dict[str, Any]]:
    import pyarrow.compute as pc

    rows = lake.read("rounds", columns=["stage_status"], filter=pc.field("round") == round).to_pylist()
    raw = rows[0]["stage_status"] if rows else None
    return json.loads(raw) if raw else {}


def due_stages(round: int, cfg: RoundConfig) -> list[str]:
    """The stages this round runs: CT only every k rounds, RL only when due (see training.pipeline.train_steps)."""
    train = {s.stage for s in train_steps(round, cfg.flywheel)}
    return [s for s in STAGES if s not in TRAIN_STAGES or s in train]


def pending_stages(lake: Lake, round: int, cfg: RoundConfig) -> list[str]:
    done = {k for k, v in stage_status(lake, round).items() if v.get("status") == "done"}
    return [s for s in due_stages(round, cfg) if s not in done]


def mark(lake: Lake, round: int, stage: str, status: str, **info: Any) -> None:
    from validators.routing import update_round

    now = datetime.now(UTC).isoformat(timespec="seconds")
    before = {k: v for k, v in stage_status(lake, round).get(stage, {}).items() if k != "error"}  # a retry's old error
    entry = {**before, "status": status, **info}
    entry["started_at" if status == "running" else "finished_at"] = now
    update_round(lake, round, stage_status={stage: entry})


def rounds_done(lake: Lake) -> list[int]:
    """Rounds whose summary stage finished (every due stage is done before the summary runs)."""
    out = []
    for r in lake.read("rounds", columns=["round", "stage_status"]).to_pylist():
        st = json.loads(r["stage_status"]) if r["stage_status"] else {}
        if st.get("summary", {}).get("status") == "done":
            out.append(r["round"])
    return sorted(out)


def round_state(lake: Lake, round: int, cfg: RoundConfig) -> str:
    """'new' (nothing ran), 'done', or 'incomplete'."""
    st = stage_status(lake, round)
    if not st:
        return "new"
    return "done" if not pending_stages(lake, round, cfg) else "incomplete"


def next_round(lake: Lake, cfg: RoundConfig) -> int:
    """The round `flywheel round run` starts by default: one after the last finished round (0 on a new lake).

    Refuses when an earlier round is incomplete: it must be resumed first, or its piles would be out of order.
    """
    import pyarrow.compute as pc

    rounds = sorted(set(lake.read("rounds", columns=["round"]).column("round").to_pylist()))
    for r in rounds:
        if stage_status(lake, r) and round_state(lake, r, cfg) == "incomplete":
            raise RoundStateError(
                f"round {r} did not finish (pending: {', '.join(pending_stages(lake, r, cfg))}); "
                f"run `flywheel round resume {r}`"
            )
    done = rounds_done(lake)
    del pc
    return (max(done) + 1) if done else 0


def intake_round(lake: Lake, cfg: RoundConfig) -> int:
    """The round that uploads arriving now belong to: the next round, or the one after a round in progress."""
    try:
        return next_round(lake, cfg)
    except RoundStateError:
        rounds = lake.read("rounds", columns=["round"]).column("round").to_pylist()
        return max(rounds) + 1


def base_checkpoint(lake: Lake, round: int, stage: str, cfg: RoundConfig) -> str | None:
    """The checkpoint a training stage starts from: the previous due training stage of this round, else the last
    training stage of the previous finished round, else None (a fresh model)."""
    order = [s for s in due_stages(round, cfg) if s in TRAIN_STAGES]
    st = stage_status(lake, round)
    before = order[: order.index(stage)]
    for s in reversed(before):
        ck = st.get(s, {}).get("checkpoint")
        if ck:
            return ck
    return final_checkpoint(lake, round - 1, cfg) if round > 0 else None


def final_checkpoint(lake: Lake, round: int, cfg: RoundConfig) -> str | None:
    """The checkpoint a round ended with (its last due training stage), walking back over rounds without one."""
    while round >= 0:
        st = stage_status(lake, round)
        for s in reversed([s for s in due_stages(round, cfg) if s in TRAIN_STAGES]):
            ck = st.get(s, {}).get("checkpoint")
            if ck:
                return ck
        round -= 1  # noqa: A001 - the round number, as everywhere
    return None


# ------------------------------------------------------------------------------------------------ the stages
def landing_inputs(landing: Path) -> dict[str, list[Path]]:
    """What a landing folder holds, by source: rollouts/ (jsonl, parquet), annotations/ (json), and every other
    top-level entry is a think-aloud bundle or AgentNet recording (dot-entries are bookkeeping and skipped)."""
    out: dict[str, list[Path]] = {"think_aloud": [], "annotations": [], "rollouts": []}
    if not landing.is_dir():
        return out
    for p in sorted(landing.iterdir()):
        if p.name.startswith("."):
            continue
        if p.name == "rollouts" and p.is_dir():
            out["rollouts"] = sorted(f for f in p.rglob("*") if f.suffix in (".jsonl", ".ndjson", ".parquet"))
        elif p.name == "annotations" and p.is_dir():
            out["annotations"] = [p] if any(p.rglob("*.json")) else []
        else:
            out["think_aloud"].append(p)
    return out


def stage_ingest(ctx: RoundContext) -> dict[str, Any]:
    """New uploads of all three sources land as this round's episodes (files already ingested add nothing)."""
    from ingest.annotations import ingest_annotations
    from ingest.rollouts import ingest_rollout_file
    from ingest.think_aloud import ingest_paths

    inputs = landing_inputs(ctx.landing)
    out = {"think_aloud": 0, "annotations": 0, "rollouts": 0, "quarantined": 0}
    if inputs["think_aloud"]:
        r = ingest_paths(ctx.lake, inputs["think_aloud"], round=ctx.round)
        out["think_aloud"], out["quarantined"] = r.episodes_added, out["quarantined"] + r.quarantined_added
    if inputs["annotations"]:
        r = ingest_annotations(ctx.lake, inputs["annotations"], round=ctx.round).result
        out["annotations"], out["quarantined"] = r.episodes_added, out["quarantined"] + r.quarantined_added
    for f in inputs["rollouts"]:
        r = ingest_rollout_file(ctx.lake, f, round=ctx.round).result
        out["rollouts"] += r.episodes_added
        out["quarantined"] += r.quarantined_added
    return out


def stage_route(ctx: RoundContext) -> dict[str, Any]:
    from validators.routing import route_round

    return route_round(ctx.lake, ctx.round).as_dict()


def stage_train(ctx: RoundContext, stage: str) -> dict[str, Any]:
    """One training job from the recorded base; its checkpoint goes into this stage's status."""
    from training.pipeline import run_training

    f = ctx.cfg.flywheel
    base = base_checkpoint(ctx.lake, ctx.round, stage, ctx.cfg)

    def tick(i: int, loss: float) -> None:
        ctx.progress("tick", {"round": ctx.round, "stage": stage, "i": i, "loss": loss})

    sft_cfg = f.cold_sft if (stage == "sft" and ctx.round == 0) else None
    res, _ = run_training(ctx.lake, ctx.round, stage, base, f, tick, sft_cfg=sft_cfg)
    row = res.to_row()
    return {"checkpoint": res.output_checkpoint, "base": base, "steps": res.steps, "tokens": res.tokens,
            "loss_first": row["loss_first"], "loss_last": row["loss_last"], "run_id": row["run_id"]}  # fmt: skip


def stage_sample(ctx: RoundContext) -> dict[str, Any]:
    """Rejection sampling with this round's final checkpoint; the attempts become round R+1's new episodes."""
    from training.checkpoints import fetch
    from training.envs import render_steps, training_tasks
    from training.sampling import rejection_sample

    uri = final_checkpoint(ctx.lake, ctx.round, ctx.cfg)
    if uri is None:
        raise RoundStateError(f"round {ctx.round} has no checkpoint to sample with")
    f = ctx.cfg.flywheel
    nxt = ctx.round + 1
    tasks = training_tasks(f.sampling.tasks, seed=ctx.cfg.seed * 1000 + 17 * nxt + 1)

    def tick(n: int) -> None:
        ctx.progress("tick", {"round": ctx.round, "stage": "sample", "n": n})

    res = rejection_sample(ctx.lake, nxt, fetch(ctx.lake, uri), tasks, ctx.landing / "rollouts", f.sampling, f.prompt,
                           render=render_steps, on_step=tick)  # fmt: skip
    return {"attempts": res.attempts, "env_passed": res.passed, "episodes_added": res.episodes_added,
            "policy_version": res.policy_version, "for_round": nxt, "file": res.path}  # fmt: skip


def stage_evaluate(ctx: RoundContext) -> dict[str, Any]:
    """Held-out pass rate of this round's final checkpoint (95% interval, per level and family) into `rounds`."""
    from training.checkpoints import fetch
    from training.envs import heldout_tasks
    from training.evaluate import evaluate, record_eval

    uri = final_checkpoint(ctx.lake, ctx.round, ctx.cfg)
    if uri is None:
        raise RoundStateError(f"round {ctx.round} has no checkpoint to evaluate")

    def tick(n: int) -> None:
        ctx.progress("tick", {"round": ctx.round, "stage": "evaluate", "n": n})

    f = ctx.cfg.flywheel
    res = evaluate(fetch(ctx.lake, uri), heldout_tasks(ctx.cfg.eval_per_cell), f.eval, f.prompt, tick)
    record_eval(ctx.lake, ctx.round, res)
    o = res.overall
    return {"eval_n": o.n, "eval_pass_rate": o.rate, "lo": o.lo, "hi": o.hi, "policy_version": res.policy_version}


def stage_summary(ctx: RoundContext, dashboard: Path | None = None) -> dict[str, Any]:
    """The round's table as markdown (for the Prefect artifact) and the dashboard page, regenerated."""
    from dashboards import render_dashboard

    out: dict[str, Any] = {"markdown": round_markdown(ctx.lake, ctx.round)}
    if dashboard is not None:
        out["dashboard"] = str(render_dashboard(ctx.lake, dashboard))
    return out


def round_markdown(lake: Lake, round: int) -> str:
    import pyarrow.compute as pc

    rows = lake.read("rounds", filter=pc.field("round") == round).to_pylist()
    if not rows:
        return f"# Round {round}\n\n(no row yet)"
    r = rows[0]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    st = json.loads(r["stage_status"] or "{}")
    lines = [
        f"# Flywheel round {round}",
        "",
        "| new | pass | fail | P(V=1) [95% CI] | held-out pass [95% CI] | SFT pile | CT pile | policy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {r['n_new']} | {r['n_pass']} | {r['n_fail']} | {pct(r['pass_rate'])} [{pct(r['pass_rate_lo'])}, {pct(r['pass_rate_hi'])}] "
        f"| {pct(r['eval_pass_rate'])} [{pct(r['eval_pass_rate_lo'])}, {pct(r['eval_pass_rate_hi'])}] "
        f"| {r['sft_size']} | {r['ct_size']} | {r['policy_version'] or '-'} |",
        "",
        "| stage | status | seconds |",
        "| --- | --- | --- |",
    ]
    for s in STAGES:
        if s in st:
            lines.append(f"| {s} | {st[s].get('status')} | {st[s].get('seconds', '')} |")
    return "\n".join(lines)


def run_stage(ctx: RoundContext, stage: str, dashboard: Path | None = None,
              publish: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run one stage with its status kept in `rounds` (running -> done | failed).

    `publish(info)` (the round flow's Prefect artifact) runs before the stage counts as done: if it fails (the
    Prefect API is down), the stage is failed, and `resume` redoes it rather than finding a round that is done
    without its summary.
    """
    mark(ctx.lake, ctx.round, stage, "running")
    t0 = time.perf_counter()
    try:
        if stage == "ingest":
            info = stage_ingest(ctx)
        elif stage == "route":
            info = stage_route(ctx)
        elif stage in TRAIN_STAGES:
            info = stage_train(ctx, stage)
        elif stage == "sample":
            info = stage_sample(ctx)
        elif stage == "evaluate":
            info = stage_evaluate(ctx)
        elif stage == "summary":
            info = stage_summary(ctx, dashboard)
        else:
            raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
        if publish is not None:
            publish(info)
    except BaseException as e:
        mark(ctx.lake, ctx.round, stage, "failed", error=f"{type(e).__name__}: {e}"[:500],
             seconds=round(time.perf_counter() - t0, 2))  # fmt: skip
        raise
    keep = {k: v for k, v in info.items() if k in ("checkpoint", "base", "run_id", "policy_version", "for_round")}
    mark(ctx.lake, ctx.round, stage, "done", seconds=round(time.perf_counter() - t0, 2), **keep)
    ctx.progress("stage", {"round": ctx.round, "stage": stage, "info": info})
    return info


__all__ = ["STAGES", "RoundConfig", "RoundContext", "RoundStateError", "ct_due", "due_stages", "pending_stages",
           "run_stage", "next_round", "round_state", "stage_status", "landing_inputs", "round_markdown"]  # fmt: skip


def config_from_dict(cls: type, data: dict[str, Any] | None) -> Any:
    """Build a (nested, frozen) config dataclass from a dict such as a parsed JSON/TOML file; unknown keys are
    refused by name, since a typo must not silently fall back to a default."""
    import dataclasses
    import typing

    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {', '.join(sorted(unknown))}")
    kw: dict[str, Any] = {}
    for k, v in data.items():
        t = hints[k]
        if dataclasses.is_dataclass(t) and isinstance(v, dict):
            kw[k] = config_from_dict(t, v)
        elif isinstance(v, list):
            kw[k] = tuple(v)
        else:
            kw[k] = v
    return cls(**kw)


def load_round_config(path: str | Path | None) -> RoundConfig:
    """The round configuration: defaults, overridden by a JSON or TOML file (nested sections per config)."""
    if path is None:
        return RoundConfig()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} does not exist")
    if p.suffix == ".toml":
        import tomllib

        data = tomllib.loads(p.read_text())
    else:
        data = json.loads(p.read_text())
    return config_from_dict(RoundConfig, data)
