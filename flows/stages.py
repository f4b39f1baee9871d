"""The flywheel round as a list of stages, each a plain function over a RoundContext, with its status kept in
`rounds` (validators/rounds.py). The one round engine: `flywheel round run`, the Prefect deployments and
`flywheel demo` all run these stages.

    sample -> annotate -> intake -> route -> ct (when due) -> sft -> rl (when due) -> evaluate -> summary

- sample: the newest model (the previous round's final checkpoint) makes K attempts per fresh training task
  (rejection sampling); its attempts land as this round's new episodes.
- annotate: interactive annotation on that same checkpoint's proposals. With `people="humans"` the stage publishes
  the tasks (landing/assignments/round-R.json) and people's sessions land through a later intake; with
  `people="scripted"` (the demo) the backend's scripted annotator plays them now.
- intake: whatever landed (think-aloud bundles, annotation sessions, rollout files) becomes this round's episodes.
- route: validators V(s) sort the round's new episodes into the SFT and CT piles.
- ct, sft, rl: the training jobs due this round, chained through recorded checkpoints.
- evaluate: held-out pass rate of the round's final checkpoint; summary: the round's markdown and dashboard.

Sample and annotate run first because they act with the previous round's model (round 0 has none: it starts
from the landing area's human or cold-start data), so a round always trains on its own new data and the last
round of a run leaves no sampling half-used. Each stage's status (running / done / failed, times, outputs) is
merged into the round's `stage_status`. A stage is idempotent (appends are keyed by content hashes), so `resume`
runs every due stage that is not `done`, in order. Every checkpoint a stage uses comes from the statuses recorded
before it, never from "the newest checkpoint", so a resumed round uses exactly what an uninterrupted one would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.allocator import release
from flows.config import RoundConfig
from storage.lake import Lake
from training.pipeline import train_steps
from validators.rounds import read_round, read_rounds, stage_status, update_round

STAGES = ("sample", "annotate", "intake", "route", "ct", "sft", "rl", "evaluate", "summary")
TRAIN_STAGES = ("ct", "sft", "rl")
ASSIGNMENTS = "flywheel.assignments/1"

Progress = Callable[[str, dict[str, Any]], None]


def _quiet(event: str, info: dict[str, Any]) -> None:
    return None


class RoundStateError(ValueError):
    """A round asked for in a state that does not allow it (already finished, not started, ...)."""


@dataclass(frozen=True)
class RoundContext:
    """What every stage sees: the lake, the round, the landing area, the round's configuration (and through it the
    environment backend), where progress goes, and where the summary writes the dashboard."""

    lake: Lake
    round: int
    landing: Path
    cfg: RoundConfig
    progress: Progress = _quiet
    dashboard: Path | None = None
    #: When the round should end (time.time()), or None: its SFT then stops early enough to leave the stages after
    #: it what they took in the round before (flows.budget.sft_stop_at; the demo's last round).
    end_by: float | None = None

    @property
    def backend(self):  # noqa: ANN201 - training.envs.EnvBackend
        return self.cfg.backend

    def tick(self, stage: str, **info: Any) -> None:
        self.progress("tick", {"round": self.round, "stage": stage, **info})


# ------------------------------------------------------------------------------------------------ which stages
def due_stages(round: int, cfg: RoundConfig) -> list[str]:
    """The stages round `round` runs: sample and annotate from round 1 on (they need a model) when sized above 0,
    CT every k rounds and RL when due (training.pipeline.train_steps)."""
    train = {s.stage for s in train_steps(round, cfg.flywheel)}
    skip = {
        "sample": round == 0 or cfg.flywheel.sampling.tasks <= 0,
        "annotate": round == 0 or cfg.annotate_tasks <= 0,
    }
    return [s for s in STAGES if not skip.get(s, False) and (s not in TRAIN_STAGES or s in train)]


def pending_stages(lake: Lake, round: int, cfg: RoundConfig) -> list[str]:
    done = {k for k, v in stage_status(lake, round).items() if v.get("status") == "done"}
    return [s for s in due_stages(round, cfg) if s not in done]


def rounds_done(lake: Lake) -> list[int]:
    """Rounds whose summary stage finished (every due stage is done before the summary runs)."""
    return [r.round for r in read_rounds(lake) if r.status("summary") == "done"]


def round_state(lake: Lake, round: int) -> str:
    """'new' (no stage ran), 'done' (its summary finished: the last stage, after every due one) or 'incomplete'."""
    rec = read_round(lake, round)
    if rec is None or not rec.stages:
        return "new"
    return "done" if rec.status("summary") == "done" else "incomplete"


def next_round(lake: Lake) -> int:
    """The round `flywheel round run` starts by default: one after the last finished round (0 on a new lake).

    Refuses when a round is incomplete: it must be resumed first, or its piles would be out of order.
    """
    for rec in read_rounds(lake):
        if rec.stages and rec.status("summary") != "done":
            raise RoundStateError(f"round {rec.round} did not finish; run `flywheel round resume {rec.round}`")
    done = rounds_done(lake)
    return (max(done) + 1) if done else 0


def intake_round(lake: Lake) -> int:
    """The round that uploads arriving now belong to: the next round, or the one after a round in progress."""
    try:
        return next_round(lake)
    except RoundStateError:
        return max(r.round for r in read_rounds(lake)) + 1


# ------------------------------------------------------------------------------------------------ checkpoints
def _stage_checkpoint(st: dict[str, dict[str, Any]], stages: tuple[str, ...] | list[str]) -> str | None:
    """The checkpoint of the last of `stages` that finished with one, by the recorded statuses."""
    for s in reversed(stages):
        e = st.get(s) or {}
        if e.get("status") == "done" and e.get("checkpoint"):
            return e["checkpoint"]
    return None


def final_checkpoint(lake: Lake, round: int) -> str | None:
    """The checkpoint a round ended with (its last training stage that ran), walking back over rounds without one;
    None before any round trained."""
    while round >= 0:
        ck = _stage_checkpoint(stage_status(lake, round), TRAIN_STAGES)
        if ck:
            return ck
        round -= 1  # noqa: A001 - the round number, as everywhere
    return None


def base_checkpoint(lake: Lake, round: int, stage: str) -> str | None:
    """The checkpoint a training stage starts from: the training stage before it in this round, else the previous
    round's final checkpoint, else None (a fresh model from the config, the shipped base by default)."""
    before = TRAIN_STAGES[: TRAIN_STAGES.index(stage)]
    return _stage_checkpoint(stage_status(lake, round), before) or (
        final_checkpoint(lake, round - 1) if round > 0 else None
    )


def acting_checkpoint(lake: Lake, round: int) -> str:
    """The model that samples and proposes in round `round`: the previous round's final checkpoint."""
    uri = final_checkpoint(lake, round - 1)
    if uri is None:
        raise RoundStateError(f"round {round} has no earlier checkpoint to act with; run round 0 first")
    return uri


# ------------------------------------------------------------------------------------------------ bookkeeping
def mark(lake: Lake, round: int, stage: str, status: str, **info: Any) -> None:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    before = {k: v for k, v in stage_status(lake, round).get(stage, {}).items() if k != "error"}  # a retry's old error
    entry = {**before, "status": status, **info}
    entry["started_at" if status == "running" else "finished_at"] = now
    update_round(lake, round, stage_status={stage: entry})


def record_config(lake: Lake, round: int, cfg: RoundConfig, landing: Path) -> None:
    """The configuration and landing area the round runs with, in its breakdown: `flywheel round run` continues a
    lake with them when not told otherwise."""
    update_round(lake, round, breakdown={"config": cfg.as_dict(), "landing": str(landing)})


def landing_inputs(landing: Path) -> dict[str, list[Path]]:
    """What a landing folder holds, by source: rollouts/ (jsonl, parquet), annotations/ (json), assignments/ (the
    tasks published for people: not an upload), and every other top-level entry is a think-aloud bundle, a folder
    of them, or an AgentNet recording (dot-entries are bookkeeping and skipped)."""
    out: dict[str, list[Path]] = {"think_aloud": [], "annotations": [], "rollouts": []}
    if not landing.is_dir():
        return out
    for p in sorted(landing.iterdir()):
        if p.name.startswith(".") or p.name == "assignments":
            continue
        if p.name == "rollouts" and p.is_dir():
            out["rollouts"] = sorted(f for f in p.rglob("*") if f.suffix in (".jsonl", ".ndjson", ".parquet"))
        elif p.name == "annotations" and p.is_dir():
            out["annotations"] = [p] if any(p.rglob("*.json")) else []
        else:
            out["think_aloud"].append(p)
    return out


def focus_split(lake: Lake, round: int, n: int, floor: float = 0.25, by: str = "level") -> dict[Any, int] | None:
    """{group: tasks} for `n` tasks, in proportion to round `round`'s held-out failure rate per group (`by`: level,
    the sandbox's; family, MiniWoB++'s tasks), each at least `floor` times the even share; None when that round has
    no such rates or only one group."""
    rec = read_round(lake, round)
    rates = rec.eval_rates(by) if rec else {}
    if len(rates) < 2:
        return None
    even = 1 / len(rates)
    fail = {g: 1 - r for g, r in rates.items()}
    total_fail = sum(fail.values())
    w = {g: max(f / total_fail if total_fail else even, floor * even) for g, f in fail.items()}
    total = sum(w.values())
    split = {g: int(n * x / total) for g, x in sorted(w.items())}
    for g in sorted(w, key=w.get, reverse=True)[: n - sum(split.values())]:  # the remainder to the weakest groups
        split[g] += 1
    return {g: k for g, k in split.items() if k}


def _r2(x: float) -> float:
    return float(f"{x:.2f}")


# ------------------------------------------------------------------------------------------------ the stages
def acting_policy(ctx: RoundContext, uri: str) -> Any:
    """The checkpoint `uri` as the acting stages use it: in-process, or through the server at the config's
    `policy_url` (training/served.py), which must serve that checkpoint (a flywheel server is asked to load it)."""
    from training.checkpoints import fetch

    policy = fetch(ctx.lake, uri)
    if not ctx.cfg.policy_url:
        return policy
    from training.served import served

    return served(ctx.cfg.policy_url, policy, uri, str(ctx.lake.uri))


def stage_sample(ctx: RoundContext) -> dict[str, Any]:
    """Rejection sampling with the previous round's final checkpoint on fresh training tasks of the backend; the
    attempts land (through the rollout reader) as this round's new episodes."""
    from training.sampling import rejection_sample

    uri = acting_checkpoint(ctx.lake, ctx.round)
    f, env = ctx.cfg.flywheel, ctx.backend
    tasks = env.training_tasks(f.sampling.tasks, seed=ctx.cfg.seed * 1000 + 17 * ctx.round + 1)
    res = rejection_sample(ctx.lake, ctx.round, acting_policy(ctx, uri), tasks, ctx.landing / "rollouts", f.sampling,
                           f.prompt, render=env.render_steps, on_step=lambda n: ctx.tick("sample", n=n),
                           render_threads=env.render_threads)  # fmt: skip
    return {"attempts": res.attempts, "env_passed": res.passed, "episodes_added": res.episodes_added,
            "policy_version": res.policy_version, "checkpoint_used": uri, "wall_s": _r2(res.wall_s)}  # fmt: skip


def annotation_tasks(ctx: RoundContext) -> tuple[list[Any], dict[Any, int] | None]:
    """The round's annotation tasks: fresh training tasks, split over the backend's groups by the previous round's
    held-out failures when focus is on."""
    env, cfg = ctx.backend, ctx.cfg
    split = focus_split(ctx.lake, ctx.round - 1, cfg.annotate_tasks, cfg.focus_floor, env.focus_by) if cfg.annotate_focus else None  # fmt: skip
    return env.training_tasks(cfg.annotate_tasks, cfg.seed * 1000 + 17 * ctx.round + 9, split=split), split


def stage_annotate(ctx: RoundContext) -> dict[str, Any]:
    """Interactive annotation on the acting checkpoint's proposals: published for people, or played now by the
    backend's scripted annotator (the session lands through the annotation reader, overrides become preference
    pairs). The accept rate is recorded in the round's breakdown."""
    uri = acting_checkpoint(ctx.lake, ctx.round)
    tasks, split = annotation_tasks(ctx)
    env = ctx.backend
    if ctx.cfg.people == "humans":
        path = publish_assignments(ctx, uri, tasks)
        info: dict[str, Any] = {"published": len(tasks), "file": str(path), f"by_{env.focus_by}": split}
    else:
        from training.annotate import annotate_round

        f = ctx.cfg.flywheel
        res = annotate_round(ctx.lake, ctx.round, acting_policy(ctx, uri), tasks, ctx.landing / "annotations", env.reviewer,
                             env.render_steps, f.prompt, f.max_new_tokens, on_step=lambda n: ctx.tick("annotate", n=n),
                             render_threads=env.render_threads, processes=f.eval.processes)  # fmt: skip
        info = {"episodes": res.episodes, f"by_{env.focus_by}": split, "steps": res.steps, "accepted": res.accepted,
                "accept_rate": _r2(res.accept_rate), "env_passed": res.passed, "episodes_added": res.episodes_added,
                "policy_version": res.policy_version, "wall_s": _r2(res.wall_s)}  # fmt: skip
    update_round(ctx.lake, ctx.round, breakdown={"annotation": info})
    return info


def assignments_key(round: int) -> str:
    """Where in the landing area round `round` publishes its annotation tasks."""
    return f"assignments/round-{round}.json"


def publish_assignments(ctx: RoundContext, checkpoint: str, tasks: list[Any]) -> Path:
    """The round's annotation tasks for people (`flywheel.assignments/1`): which checkpoint proposes, and per task
    its id, instruction, family, level and seed, enough for an annotation tool to rebuild it in the backend."""
    doc = {
        "format": ASSIGNMENTS,
        "round": ctx.round,
        "env": ctx.cfg.env,
        "checkpoint": checkpoint,
        "tasks": [
            {"task_id": t.task_id, "instruction": t.instruction, "family": t.family, "level": t.level,
             "seed": getattr(t.payload, "seed", None)}
            for t in tasks
        ],
    }  # fmt: skip
    path = ctx.landing / assignments_key(ctx.round)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)  # atomic: a tool never reads half a file
    return path


def assignment_tasks(text: str | None, round: int, where: str) -> list[Any]:
    """The annotation tasks round `round` published for people (publish_assignments; `text` is the document, None
    when there is none, `where` names it), rebuilt as sandbox tasks (training.rollout.TaskInfo) for the workbench's
    remote screen. Raises InputError for a missing or foreign document, another environment, or a task that does
    not rebuild to the id it was published with."""
    from core.errors import InputError
    from sandbox.tasks import make_task
    from training.envs import task_info

    if text is None:
        raise InputError("no_assignments", f"round {round} published no annotation tasks", where)
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InputError("bad_assignments", f"not JSON: {e}", where) from None
    if not isinstance(doc, dict) or doc.get("format") != ASSIGNMENTS:
        raise InputError("bad_assignments", f"not a {ASSIGNMENTS} document", where)
    if doc.get("env") != "sandbox":
        raise InputError(
            "wrong_env", f"round {round} runs {doc.get('env')!r}; the workbench's screen is the sandbox", where
        )
    out = []
    for t in doc.get("tasks") or []:
        try:
            task = make_task(str(t["family"]), int(t["level"]), int(t["seed"]))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError("bad_assignments", f"task {t!r:.80} does not rebuild: {e}", where) from None
        if task.task_id != t.get("task_id"):
            raise InputError("bad_assignments", f"task {t.get('task_id')!r} rebuilds as {task.task_id!r}", where)
        out.append(task_info(task))
    return out


def stage_intake(ctx: RoundContext) -> dict[str, Any]:
    """Whatever landed becomes this round's episodes (files already ingested add nothing): rollout files first,
    then annotation sessions, then think-aloud bundles (ASR)."""
    from ingest.annotations import ingest_annotations
    from ingest.rollouts import ingest_rollout_file
    from ingest.think_aloud import ingest_paths

    inputs = landing_inputs(ctx.landing)
    out = {"rollouts": 0, "annotations": 0, "think_aloud": 0, "quarantined": 0}
    for f in inputs["rollouts"]:
        r = ingest_rollout_file(ctx.lake, f, round=ctx.round).result
        out["rollouts"] += r.episodes_added
        out["quarantined"] += r.quarantined_added
    if inputs["annotations"]:
        r = ingest_annotations(ctx.lake, inputs["annotations"], round=ctx.round).result
        out["annotations"], out["quarantined"] = r.episodes_added, out["quarantined"] + r.quarantined_added
    if inputs["think_aloud"]:
        r = ingest_paths(ctx.lake, inputs["think_aloud"], round=ctx.round)
        out["think_aloud"], out["quarantined"] = r.episodes_added, out["quarantined"] + r.quarantined_added
    return out


def stage_route(ctx: RoundContext) -> dict[str, Any]:
    from validators.routing import route_round

    return route_round(ctx.lake, ctx.round).as_dict()


def stage_train(ctx: RoundContext, stage: str) -> dict[str, Any]:
    """One training job from the recorded base; its checkpoint goes into this stage's status. RL practises on the
    backend's training tasks."""
    from training.pipeline import run_training

    f = ctx.cfg.flywheel
    base = base_checkpoint(ctx.lake, ctx.round, stage)
    if stage == "rl" and ctx.cfg.rl_mode == "specialists":  # specialists from `base`, merged (flows/specialists.py)
        from flows.specialists import run_specialists

        return run_specialists(ctx.lake, ctx.round, ctx.cfg, base, lambda **kw: ctx.tick(stage, **kw))
    sft_cfg = f.cold_sft if (stage == "sft" and ctx.round == 0) else None
    if stage == "sft":
        sft_cfg = _sft_by_the_clock(ctx) or sft_cfg  # None without an end: the configured SFT
    good = rollouts = None
    if stage == "rl" and ctx.cfg.rl_mode == "joint":
        from training.envs import known_good

        good = known_good(ctx.backend, ctx.backend.training_tasks(4, 100_000 + ctx.round))
        if ctx.cfg.rl_through_server and ctx.cfg.policy_url:
            from training.rollout_server import RolloutServer

            rollouts = RolloutServer(ctx.cfg.policy_url, ctx.cfg.rl_sync_every)
    if stage == "rl" and ctx.cfg.rl_mode == "search":  # practice by search and imitation (training/search_practice.py)
        from training.search_practice import search_job

        res, _ = search_job(ctx.lake, ctx.round, base, lambda n, s: ctx.backend.training_tasks(n, 100_000 + s), f.search.for_round(ctx.round),
                            f.prompt, lambda i, st: ctx.tick(stage, i=i, solved=st["solved"], steps=st["steps"]),
                            ctx.backend.name, ctx.cfg.env_tasks)  # fmt: skip
    else:
        res, _ = run_training(ctx.lake, ctx.round, stage, base, f, lambda i, loss: ctx.tick(stage, i=i, loss=loss),
                              sft_cfg=sft_cfg, rl_tasks=ctx.backend.training_tasks, known_good=good, rollouts=rollouts)  # fmt: skip
    row = res.to_row()
    if stage == "rl":
        update_round(ctx.lake, ctx.round, breakdown={"rl": {"mode": ctx.cfg.rl_mode, "base": base,
                                                            "checkpoint": res.output_checkpoint, "run_id": row["run_id"]}})  # fmt: skip
    return {"checkpoint": res.output_checkpoint, "base": base, "steps": res.steps, "tokens": res.tokens,
            "loss_first": row["loss_first"], "loss_last": row["loss_last"], "run_id": row["run_id"],
            "wall_s": _r2(res.wall_s)}  # fmt: skip


def _sft_by_the_clock(ctx: RoundContext) -> Any:  # training.config.SFTConfig | None
    """The round's SFT configuration stopping by the time that leaves the stages after it what they took in the round
    before, so that the round ends by `ctx.end_by`; None (the configured SFT) when the round before recorded none.
    The decision goes into the round's breakdown (`sft_clock`) and the progress."""
    from dataclasses import replace

    from flows.budget import sft_stop_at

    if ctx.end_by is None:
        return None
    prev = read_round(ctx.lake, ctx.round - 1) if ctx.round > 0 else None
    if prev is None or not prev.stages:
        ctx.progress("budget", {"round": ctx.round, "why": f"round {ctx.round}'s SFT runs as configured: no round "
                                "before it recorded what the stages after the SFT take, so the end is not held"})  # fmt: skip
        return None
    after = [s for s in due_stages(ctx.round, ctx.cfg) if STAGES.index(s) > STAGES.index("sft")]
    searched = (((prev.config or {}).get("flywheel") or {}).get("search") or {}).get("time_budget_s")  # as it ran
    stop_at, keep = sft_stop_at(ctx.end_by, ctx.cfg, after, prev.stages, searched)
    left = stop_at - time.time()
    update_round(ctx.lake, ctx.round, breakdown={"sft_clock": {"end_by": round(ctx.end_by, 1), "stop_at":
                                                                 round(stop_at, 1), "keep_s": round(keep, 1)}})  # fmt: skip
    ctx.progress("budget", {"round": ctx.round, "why": f"round {ctx.round}'s SFT stops within {left:.0f} s (at its step "
                            f"cap if sooner), keeping {keep:.0f} s for {', '.join(after)}"})  # fmt: skip
    sft = ctx.cfg.flywheel.sft
    return replace(sft, optim=replace(sft.optim, stop_at=stop_at))


def stage_evaluate(ctx: RoundContext) -> dict[str, Any]:
    """Held-out pass rate of the round's final checkpoint (95% interval, per level and family) into `rounds`, with
    the backend's own figures; round 0 also records the scripted demonstrators' held-out success where the backend
    measures it."""
    from training.evaluate import evaluate, record_eval

    uri = final_checkpoint(ctx.lake, ctx.round)
    if uri is None:
        raise RoundStateError(f"round {ctx.round} has no checkpoint to evaluate")
    env, f = ctx.backend, ctx.cfg.flywheel
    policy, tasks = acting_policy(ctx, uri), env.heldout_tasks(ctx.cfg.eval_per_cell)
    res = evaluate(policy, tasks, f.eval, f.prompt, lambda n: ctx.tick("evaluate", n=n))
    record_eval(ctx.lake, ctx.round, res)
    extra: dict[str, Any] = {}
    if ran_specialists(ctx.lake, ctx.round):  # the merged model on the mixed held-out set
        from flows.specialists import mixed_eval

        done = {t.task_id: ok for t, ok in zip(tasks, res.passed)}
        extra["mixed"] = mixed_eval(ctx.lake, ctx.round, ctx.cfg, policy, done, lambda **kw: ctx.tick("evaluate", **kw))
    effect = rl_effect(ctx, tasks, res) if ctx.cfg.rl_effect else None
    if effect is not None:
        extra["rl_effect"] = effect
    extra["env"] = {"name": env.name, **(env.stats() or {})}
    ref = env.reference(ctx.cfg.eval_per_cell) if ctx.round == 0 else None
    if ref is not None:
        extra["demonstrator_eval"] = ref
    update_round(ctx.lake, ctx.round, breakdown=extra)
    return res.breakdown() | {"wall_s": _r2(res.wall_s), "checkpoint": uri} | extra


def rl_effect(ctx: RoundContext, tasks: Any, after: Any) -> dict[str, Any] | None:
    """RL's own share of the round's gain: the RL stage's base (the round's SFT checkpoint) on the same held-out tasks
    as the final checkpoint (`after`, training.evaluate.EvalResult), compared task by task (exact McNemar). None when
    the round ran no RL. Greedy evaluation, so a resumed round measures the same."""
    from dataclasses import asdict

    from core.stats import paired_test
    from training.evaluate import evaluate

    rl = stage_status(ctx.lake, ctx.round).get("rl") or {}
    base = rl.get("base")
    if rl.get("status") != "done" or not base:
        return None
    f = ctx.cfg.flywheel
    before = evaluate(
        acting_policy(ctx, base), tasks, f.eval, f.prompt, lambda n: ctx.tick("evaluate", n=n, arm="before RL")
    )
    test = paired_test(before.passed, after.passed)
    return {"base": base, "before": asdict(before.overall), "after": asdict(after.overall),
            "delta": after.overall.rate - before.overall.rate, "p": test["p"], "rl_only": int(test["b_only"]),
            "base_only": int(test["a_only"]), "wall_s": _r2(before.wall_s)}  # fmt: skip


def ran_specialists(lake: Lake, round: int) -> bool:
    """Whether round `round`'s RL stage ended with specialists and their merge (by its recorded status)."""
    rl = stage_status(lake, round).get("rl") or {}
    return rl.get("status") == "done" and rl.get("mode") == "specialists"


def stage_summary(ctx: RoundContext) -> dict[str, Any]:
    """The round's table as markdown (for the Prefect artifact) and the dashboard page, regenerated."""
    out: dict[str, Any] = {"markdown": round_markdown(ctx.lake, ctx.round)}
    if ctx.dashboard is not None:
        from dashboards import render_dashboard

        out["dashboard"] = str(render_dashboard(ctx.lake, ctx.dashboard))
    return out


def round_markdown(lake: Lake, round: int) -> str:
    rec = read_round(lake, round)
    if rec is None:
        return f"# Round {round}\n\n(no row yet)"

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines = [
        f"# Flywheel round {round}",
        "",
        "| new | pass | fail | P(V=1) [95% CI] | held-out pass [95% CI] | SFT pile | CT pile | policy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {rec.n_new} | {rec.n_pass} | {rec.n_fail} | {pct(rec.pass_rate)} [{pct(rec.pass_rate_lo)}, {pct(rec.pass_rate_hi)}] "
        f"| {pct(rec.eval_pass_rate)} [{pct(rec.eval_pass_rate_lo)}, {pct(rec.eval_pass_rate_hi)}] "
        f"| {rec.sft_size} | {rec.ct_size} | {rec.policy_version or '-'} |",
        "",
        "| stage | status | seconds |",
        "| --- | --- | --- |",
    ]  # fmt: skip
    for s in STAGES:
        if s in rec.stages:
            lines.append(f"| {s} | {rec.stages[s].get('status')} | {rec.stages[s].get('seconds', '')} |")
    return "\n".join(lines + rl_markdown(rec))


def rl_markdown(rec: Any) -> list[str]:
    """The round's RL mode; with specialists, each one's world and checkpoint, the merge's alphas, and the merged
    model on the mixed held-out set (validators.rounds.RLSummary, RoundRecord.mixed)."""
    rl = rec.rl
    if rl is None:
        return []
    out = ["", f"RL: {rl.describe()} -> {rl.checkpoint or '-'}"]
    e = rec.rl_effect
    if e:
        b, a = e["before"], e["after"]
        out += ["", "| held-out | before RL [95% CI] | after RL [95% CI] | RL (points) | only RL passes | only before | McNemar p |",
                "| --- | --- | --- | --- | --- | --- | --- |",
                f"| n={a['n']} | {100 * b['rate']:.1f}% [{100 * b['lo']:.1f}%, {100 * b['hi']:.1f}%] "
                f"| {100 * a['rate']:.1f}% [{100 * a['lo']:.1f}%, {100 * a['hi']:.1f}%] | {100 * e['delta']:+.1f} "
                f"| {e['rl_only']} | {e['base_only']} | {e['p']:.2g} |"]  # fmt: skip
    if rl.mode != "specialists":
        return out
    out += ["", "| specialist | world | alpha | checkpoint |", "| --- | --- | --- | --- |"]
    out += [
        f"| {s.name} | {s.subset()} | {rl.alphas.get(s.name, 0):g} | {s.checkpoint or '-'} |" for s in rl.specialists
    ]
    rates = rec.mixed.get("rates") or {}
    if rates:
        out += ["", "| mixed held-out (merged) | n | pass [95% CI] |", "| --- | --- | --- |"]
        out += [f"| {k} | {r['n']} | {100 * r['rate']:.1f}% [{100 * r['lo']:.1f}%, {100 * r['hi']:.1f}%] |"
                for k, r in rates.items()]  # fmt: skip
    return out


_RUN: dict[str, Callable[[RoundContext], dict[str, Any]]] = {
    "sample": stage_sample,
    "annotate": stage_annotate,
    "intake": stage_intake,
    "route": stage_route,
    "evaluate": stage_evaluate,
    "summary": stage_summary,
}
#: What a stage's status keeps of its outputs (the chain later stages and resumes read).
_KEEP = ("checkpoint", "base", "run_id", "policy_version", "checkpoint_used", "mode")


def run_stage(ctx: RoundContext, stage: str, publish: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one stage with its status kept in `rounds` (running -> done | failed).

    `publish(info)` (the round flow's Prefect artifact) runs before the stage counts as done: if it fails (the
    Prefect API is down), the stage is failed, and `resume` redoes it rather than finding a round that is done
    without its summary.
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    mark(ctx.lake, ctx.round, stage, "running")
    t0 = time.perf_counter()
    try:
        info = stage_train(ctx, stage) if stage in TRAIN_STAGES else _RUN[stage](ctx)
        if publish is not None:
            publish(info)
    except BaseException as e:
        mark(ctx.lake, ctx.round, stage, "failed", error=f"{type(e).__name__}: {e}"[:500],
             seconds=round(time.perf_counter() - t0, 2))  # fmt: skip
        raise
    finally:
        release()  # what the stage's heap held free goes back: the next stage starts from its live memory
    keep = {k: v for k, v in info.items() if k in _KEEP}
    mark(ctx.lake, ctx.round, stage, "done", seconds=round(time.perf_counter() - t0, 2), **keep)
    ctx.progress("stage", {"round": ctx.round, "stage": stage, "info": info})
    return info
