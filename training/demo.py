"""The demo's stages as plain functions: cold-start data through the three ingestion paths, then flywheel rounds.

    cold start (round 0): demonstrators play the backend's tasks -> think-aloud bundles, annotation sessions, rollout
                          files -> the real readers land them -> validate and route -> the first policy (SFT)
    round r >= 1:         rejection sampling with the newest checkpoint -> interactive annotation of fresh tasks on
                          its proposals -> validate and route -> CT when due -> SFT -> RL -> held-out evaluation

The environment backend is `cfg.env` (training/envs.py): the built-in sandbox, or MiniWoB++ in a browser pool.
flows/demo.py wraps each function in a Prefect task; flywheel/commands/demo.py shows the progress and the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from training.base import BASE_ARCH, BASE_MODEL, BASE_PROMPT
from training.checkpoints import fetch, newest
from training.config import CTConfig, EvalConfig, OptimConfig, RLConfig, SamplingConfig, SFTConfig
from training.pipeline import FlywheelConfig, run_training, train_steps

Say = Callable[[str, dict[str, Any]], None]


def _quiet(stage: str, info: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demo, chosen for 2 CPU cores (see docs/training.md for what they measured)."""

    seed: int = 0
    expert_tasks: int = 140  # expert rollouts in the cold start (cycling over every family and level)
    novice_tasks: int = 35  # novice rollouts (some fail: they land in CT)
    interactive_tasks: int = 14  # tasks annotated interactively (novice proposes, expert accepts or overrides)
    think_aloud: int = 2  # spoken think-aloud sessions (espeak-ng when installed) -> ASR -> aligned steps
    eval_per_cell: int | None = None  # held-out tasks per (family, level); None: all 280 (8 per cell)
    #: Tasks annotated interactively every round r >= 1: the newest checkpoint proposes, the scripted annotator
    #: accepts or overrides (training/annotate.py). 0 turns it off (rounds then add only the model's own samples).
    annotate_tasks: int = 480
    #: Annotation effort follows the model's failures: the round's tasks are split over the backend's groups (the
    #: sandbox's levels, MiniWoB++'s tasks) in proportion to the previous round's held-out failure rate in each (at
    #: least `focus_floor` of the even share each).
    annotate_focus: bool = True
    focus_floor: float = 0.25
    flywheel: FlywheelConfig = field(
        default_factory=lambda: FlywheelConfig(
            # The shipped base (training/base.py, models/sandbox-base): this architecture, pretrained on grounding and
            # copying only. From scratch the cold start reached 8.6% held-out and the rounds did not move it; the
            # model wrote the right element and then coordinates it memorised (docs/training.md).
            model=replace(BASE_ARCH, pretrained=str(BASE_MODEL)),
            # The current screen plus the last two actions: the sandbox's screens show the state (focus, values,
            # ticks, open menus), so older screens only cost tokens. The thought is the target's screen line (the
            # format the base was pretrained to write), the instruction's `Field 'value'` span for typing, or the
            # screen line an answer is read from.
            prompt=BASE_PROMPT,
            cold_sft=SFTConfig(steps=400, batch_size=16, optim=OptimConfig(lr=1e-3, warmup_steps=10, bf16=True)),
            sft=SFTConfig(
                epochs=2.5, max_steps=1600, batch_size=16, optim=OptimConfig(lr=1e-3, warmup_steps=5, bf16=True)
            ),
            ct=CTConfig(steps=10, batch_size=8, optim=OptimConfig(lr=3e-4, warmup_steps=2, bf16=True)),
            rl=RLConfig(
                iterations=1, tasks_per_iter=16, group_size=4, value_pretrain_steps=5, minibatch_size=32, ppo_epochs=1
            ),
            sampling=SamplingConfig(tasks=96, attempts=2, max_new_tokens=40),
            eval=EvalConfig(max_new_tokens=40),
            max_new_tokens=40,
            ct_every=2,
        )
    )
    env: str = "sandbox"  # the environment backend: sandbox | miniwob (training/envs.py)
    env_tasks: tuple[str, ...] | None = None  # MiniWoB++ task names (None: every task with a demonstrator)

    @property
    def backend(self):  # noqa: ANN201 - training.envs.EnvBackend, shared within the process
        from training.envs import env_backend

        return env_backend(self.env, self.env_tasks)


def quick_config() -> DemoConfig:
    """A smoke-test size (a minute or two): every stage runs, nothing is expected to learn."""
    base = DemoConfig()
    f = base.flywheel
    return replace(
        base, expert_tasks=35, novice_tasks=7, interactive_tasks=4, think_aloud=1, eval_per_cell=1, annotate_tasks=4,
        flywheel=replace(
            f, model=replace(f.model, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2, pretrained=None),
            # The smoke run's model is fresh and tiny (not the base): it needs the higher learning rate to write
            # readable actions within a short cold start (the MiniWoB++ smoke test needs it to act in the browser).
            cold_sft=replace(f.cold_sft, steps=8, batch_size=8, optim=replace(f.cold_sft.optim, lr=3e-3, warmup_steps=20)),
            sft=replace(f.sft, steps=4, epochs=None, batch_size=8),
            ct=replace(f.ct, steps=2, batch_size=4), rl=replace(f.rl, tasks_per_iter=4, group_size=2, value_pretrain_steps=2),
            sampling=replace(f.sampling, tasks=7, attempts=2, max_new_tokens=40), eval=replace(f.eval, max_new_tokens=40),
            max_new_tokens=40,
        ),
    )  # fmt: skip


def landing_for(lake_uri: str) -> Path:
    """Where the demo writes its input files: next to a local lake, or a local folder for an S3 lake."""
    if "://" in lake_uri:
        import tempfile

        return Path(tempfile.gettempdir()) / "flywheel-demo-landing"
    return Path(str(lake_uri).rstrip("/") + "-landing")


# ------------------------------------------------------------------------------------------ cold start
def _store_shots(lake, pngs: list[bytes | None]) -> list[tuple[str | None, str | None]]:  # noqa: ANN001
    from storage.objects import sha256_hex

    return [(lake.objects.put_object(p, ".png"), sha256_hex(p)) if p else (None, None) for p in pngs]


def write_rollouts_with_shots(lake, attempts: list, path: Path, policy_version: str, **app: str) -> int:  # noqa: ANN001
    """Demonstrator attempts -> a rollout file whose steps reference their screenshots in the object store.
    `app`: app= and platform= of the backend (default the sandbox's)."""
    from ingest.formats.rollouts import write_rollouts
    from sandbox.export import to_rollout

    out = []
    for a in attempts:
        r = to_rollout(a, policy_version, **app)
        refs = _store_shots(lake, [s.screenshot for s in a.steps])
        out.append(
            replace(
                r, steps=tuple(replace(s, screenshot_uri=u, screenshot_sha256=h) for s, (u, h) in zip(r.steps, refs))
            )
        )
    return write_rollouts(path, out)


def write_annotations_with_shots(lake, attempts: list, path: Path, **app: str) -> Path:  # noqa: ANN001
    """Interactive sessions -> an annotation session file whose steps reference the screenshots the tool saw."""
    from ingest.formats.annotations import write_annotation_session
    from sandbox.export import write_annotations

    write_annotations(attempts, path, **app)
    doc = json.loads(path.read_text(encoding="utf-8"))
    for ep, a in zip(doc["episodes"], attempts):
        for st, (u, h) in zip(ep["steps"], _store_shots(lake, [s.screenshot for s in a.steps])):
            st["screenshot_uri"], st["screenshot_sha256"] = u, h
    return write_annotation_session(path, doc)


def cold_start_data(lake, landing: Path, cfg: DemoConfig = DemoConfig(), say: Say = _quiet) -> dict[str, Any]:  # noqa: ANN001
    """Demonstrator data for round 0 through all three ingestion paths (the real writers and readers), played by
    the environment backend's scripted demonstrators."""
    from ingest.annotations import ingest_annotations
    from ingest.rollouts import ingest_rollout_file
    from ingest.think_aloud import ingest_paths
    from sandbox.export import write_think_aloud

    env = cfg.backend
    app = {"app": env.app, "platform": env.platform}
    landing.mkdir(parents=True, exist_ok=True)
    n_all = cfg.expert_tasks + cfg.novice_tasks + cfg.interactive_tasks + cfg.think_aloud
    tasks = env.demo_tasks(n_all, cfg.seed)
    a, b, c = (
        cfg.expert_tasks,
        cfg.expert_tasks + cfg.novice_tasks,
        cfg.expert_tasks + cfg.novice_tasks + cfg.interactive_tasks,
    )
    out: dict[str, Any] = {}

    say("rollouts", {"what": "expert and novice rollouts"})
    expert = env.demonstrate(tasks[:a], "expert")
    novice = env.demonstrate(tasks[a:b], "novice")
    p1 = landing / "cold-start" / "expert.jsonl"
    p2 = landing / "cold-start" / "novice.jsonl"
    p1.parent.mkdir(parents=True, exist_ok=True)
    write_rollouts_with_shots(lake, expert, p1, "expert-demonstrator", **app)
    write_rollouts_with_shots(lake, novice, p2, "novice-demonstrator", **app)
    out["rollouts"] = sum(ingest_rollout_file(lake, p, round=0).result.episodes_added for p in (p1, p2))

    say("annotations", {"what": "interactive annotation sessions"})
    inter = env.demonstrate(tasks[b:c], "interactive")
    p3 = write_annotations_with_shots(lake, inter, landing / "cold-start" / "annotations.json", **app)
    out["interactive"] = ingest_annotations(lake, [p3], round=0).result.episodes_added

    say("think_aloud", {"what": "think-aloud bundles (speech -> ASR)"})
    bundles = landing / "cold-start" / "think-aloud"
    for att in env.demonstrate(tasks[c:], "expert"):
        write_think_aloud(att, bundles, speech=True, **app)
    out["think_aloud"] = ingest_paths(lake, [bundles], round=0).episodes_added if cfg.think_aloud else 0
    return out


def route(lake, round: int) -> dict[str, Any]:  # noqa: ANN001
    """Validate and route the round's new episodes (a failed batch data-quality suite stops the round)."""
    from validators.routing import route_round

    return route_round(lake, round).as_dict()


# ------------------------------------------------------------------------------------------ rounds
def current_policy(lake, cfg: DemoConfig):  # noqa: ANN001, ANN201
    uri = newest(lake)
    return fetch(lake, uri) if uri else None


def acting_policy(lake, cfg: DemoConfig):  # noqa: ANN001, ANN201
    """The newest checkpoint, which a round's sampling and annotation act with; there must be one."""
    policy = current_policy(lake, cfg)
    if policy is None:
        raise ValueError("no checkpoint yet: run the cold start first")
    return policy


def sample_round(
    lake,  # noqa: ANN001
    round: int,
    landing: Path,
    cfg: DemoConfig = DemoConfig(),
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Rejection sampling with the newest checkpoint on fresh training tasks; lands through the rollout reader."""
    from training.sampling import rejection_sample

    policy = acting_policy(lake, cfg)
    f = cfg.flywheel
    env = cfg.backend
    tasks = env.training_tasks(f.sampling.tasks, seed=cfg.seed * 1000 + 17 * round + 1)
    res = rejection_sample(
        lake, round, policy, tasks, landing / "rollouts", f.sampling, f.prompt, render=env.render_steps, on_step=on_step
    )
    return {"attempts": res.attempts, "env_passed": res.passed, "episodes_added": res.episodes_added, "policy_version": res.policy_version,
            "wall_s": res.wall_s}  # fmt: skip


def focus_split(lake, round: int, n: int, floor: float = 0.25, by: str = "level") -> dict[Any, int] | None:  # noqa: ANN001
    """{group: tasks} for `n` tasks, in proportion to round `round`'s held-out failure rate per group (`by`: level,
    the sandbox's; family, MiniWoB++'s tasks), each at least `floor` times the even share; None when that round has
    no such rates or only one group."""
    rows = [r for r in lake.read("rounds").to_pylist() if r["round"] == round]
    rates = (json.loads(rows[0]["breakdown"] or "{}").get("eval", {}).get(f"by_{by}") or {}) if rows else {}
    if len(rates) < 2:
        return None
    even = 1 / len(rates)
    fail = {(int(k) if by == "level" else k): 1 - v["rate"] for k, v in rates.items()}
    total_fail = sum(fail.values())
    w = {g: max(f / total_fail if total_fail else even, floor * even) for g, f in fail.items()}
    total = sum(w.values())
    split = {g: int(n * x / total) for g, x in sorted(w.items())}
    for g in sorted(w, key=w.get, reverse=True)[: n - sum(split.values())]:  # the remainder to the weakest groups
        split[g] += 1
    return {g: k for g, k in split.items() if k}


def annotate(
    lake,  # noqa: ANN001
    round: int,
    landing: Path,
    cfg: DemoConfig = DemoConfig(),
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Interactive annotation with the newest checkpoint on fresh training tasks; lands through the annotation
    reader. The accept rate (proposals the annotator let run) is recorded in the round's breakdown."""
    from training.annotate import annotate_round
    from validators.routing import update_round

    policy = acting_policy(lake, cfg)
    env, f = cfg.backend, cfg.flywheel
    seed = cfg.seed * 1000 + 17 * round + 9
    split = (
        focus_split(lake, round - 1, cfg.annotate_tasks, cfg.focus_floor, env.focus_by) if cfg.annotate_focus else None
    )
    tasks = env.training_tasks(cfg.annotate_tasks, seed, split=split)
    res = annotate_round(lake, round, policy, tasks, landing / "annotations", env.reviewer, env.render_steps, f.prompt,
                         f.max_new_tokens, on_step=on_step)  # fmt: skip
    info = {"episodes": res.episodes, f"by_{env.focus_by}": split, "steps": res.steps, "accepted": res.accepted, "accept_rate": round_(res.accept_rate),
            "env_passed": res.passed, "episodes_added": res.episodes_added, "policy_version": res.policy_version,
            "wall_s": round_(res.wall_s)}  # fmt: skip
    update_round(lake, round, breakdown={"annotation": info})
    return info


def train_round(
    lake,  # noqa: ANN001
    round: int,
    cfg: DemoConfig = DemoConfig(),
    on_step: Callable[[str, int, float], None] | None = None,
) -> list[dict[str, Any]]:
    """The jobs due this round, chained: each starts from the previous checkpoint (round 0: a fresh model)."""
    f = cfg.flywheel
    base = newest(lake) if round > 0 else None
    out = []
    for step in train_steps(round, f):
        cb = (lambda i, loss, s=step.stage: on_step(s, i, loss)) if on_step else None
        res, policy = run_training(lake, round, step.stage, base, f, cb, sft_cfg=f.cold_sft if round == 0 else None,
                                   rl_tasks=cfg.backend.training_tasks)  # fmt: skip
        base = res.output_checkpoint
        out.append({"stage": step.stage, "steps": res.steps, "tokens": res.tokens, "loss_first": res.to_row()["loss_first"],
                    "loss_last": res.to_row()["loss_last"], "wall_s": res.wall_s, "checkpoint": res.output_checkpoint})  # fmt: skip
    return out


def evaluate_round(
    lake,  # noqa: ANN001
    round: int,
    cfg: DemoConfig = DemoConfig(),
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Held-out pass rate (per level and per family: a MiniWoB++ task is a family); round 0 also records the
    scripted demonstrators' success on the same held-out tasks when the backend measures it."""
    from training.evaluate import evaluate, record_eval
    from validators.routing import update_round

    env = cfg.backend
    policy = current_policy(lake, cfg)
    res = evaluate(policy, env.heldout_tasks(cfg.eval_per_cell), cfg.flywheel.eval, cfg.flywheel.prompt, on_step)
    record_eval(lake, round, res)
    extra = {"env": {"name": env.name, **(env.stats() or {})}}
    ref = env.reference(cfg.eval_per_cell) if round == 0 else None
    if ref is not None:
        extra["demonstrator_eval"] = ref
    update_round(lake, round, breakdown=extra)
    return res.breakdown() | {"wall_s": res.wall_s} | extra


def record_stage(lake, round: int, stage: str, started: float, status: str = "done") -> None:  # noqa: ANN001
    from validators.routing import update_round

    update_round(
        lake, round, stage_status={stage: {"status": status, "seconds": round_(time.perf_counter() - started)}}
    )


def round_(x: float) -> float:
    return float(f"{x:.2f}")


def rounds_table(lake) -> list[dict[str, Any]]:  # noqa: ANN001
    """The rounds rows with the per-level eval rates unpacked (what the demo prints at the end)."""
    rows = sorted(lake.read("rounds").to_pylist(), key=lambda r: r["round"])
    out = []
    for r in rows:
        bd = json.loads(r["breakdown"]) if r.get("breakdown") else {}
        levels = {int(k): v["rate"] for k, v in (bd.get("eval", {}).get("by_level") or {}).items()}
        families = {k: v["rate"] for k, v in (bd.get("eval", {}).get("by_family") or {}).items()}
        sampled = (bd.get("by_source") or {}).get("rollout") or {}  # the model's own attempts: P(V=1|r) of new samples
        ann = bd.get("annotation") or {}
        out.append({"sample_n": sampled.get("n"), "sample_pass_rate": sampled.get("pass_rate"), "sample_lo": sampled.get("lo"),
                    "sample_hi": sampled.get("hi"), "accept_rate": ann.get("accept_rate"), "annotated": ann.get("episodes"),
                    **{k: r.get(k) for k in ("round", "n_new", "n_pass", "pass_rate", "pass_rate_lo", "pass_rate_hi", "eval_n",
                                                "eval_pass_rate", "eval_pass_rate_lo", "eval_pass_rate_hi", "sft_size", "ct_size",
                                                "policy_version")}, "eval_by_level": levels, "eval_by_family": families,
                    "env": bd.get("env") or {}, "demonstrator_eval": {k: v["rate"] for k, v in (bd.get("demonstrator_eval") or {}).items()}})  # fmt: skip
    return out
