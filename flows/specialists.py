"""The round's RL stage as specialists and their merge (`RoundConfig.rl_mode = "specialists"`; UI-TARS-2, section 2.6),
and the mixed held-out evaluation of the merged model.

    rl stage:  for each specialist: RL from the SFT checkpoint on its world's training tasks   -> training_runs (rl)
               merge: the configured alphas, or the sweep's choice on the worlds' held-out sets -> training_runs (merge)
               the merged checkpoint is the rl stage's checkpoint (so evaluate and the next round use it)

Each specialist and the merge is a part of the rl stage with its own status in `rounds.stage_status["rl"]`
(`specialists.<name>`, `merge`: running / done / failed, times, checkpoint, run id), recorded the way the engine
records stages. A resumed round skips every part that is done; a part whose job finished and recorded its
training_runs row but was killed before its status said so is adopted from that row (same round, same base, same
specialist, or the same specialists' checkpoints for the merge), so kill -9 anywhere neither trains a finished
specialist again nor duplicates a row. Each specialist's row carries `config.specialist` (its name and world).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc

from flows.config import RoundConfig
from training.envs import World, env_backend, mixed_heldout
from validators.rounds import stage_status, update_round

Tick = Callable[..., None]


def worlds(cfg: RoundConfig) -> list[World]:
    """Each specialist's world: its families and levels of its environment (the round's, unless it names one)."""
    out = []
    for s in cfg.specialists:
        env = s.env or cfg.env
        backend = cfg.backend if env == cfg.env else env_backend(env)
        out.append(World(s.name, backend, s.families, s.levels))
    return out


# ------------------------------------------------------------------------------------------------ bookkeeping
def part_status(lake: Any, round: int, stage: str, *path: str) -> dict[str, Any]:
    """The recorded status of a part of a stage (`path`: ("specialists", name) or ("merge",)); {} when none."""
    at: Any = stage_status(lake, round).get(stage) or {}
    for k in path:
        at = (at.get(k) or {}) if isinstance(at, dict) else {}
    return at


def mark_part(lake: Any, round: int, stage: str, path: tuple[str, ...], status: str, **info: Any) -> None:
    """Merge a part's status into its stage's entry (the stage's own status and other parts untouched)."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    entry = dict(stage_status(lake, round).get(stage) or {})
    node = entry
    for k in path[:-1]:
        node[k] = dict(node.get(k) or {})
        node = node[k]
    before = {k: v for k, v in (node.get(path[-1]) or {}).items() if k != "error"}
    node[path[-1]] = {**before, "status": status, **info, ("started_at" if status == "running" else "finished_at"): now}
    update_round(lake, round, stage_status={stage: entry})


def _runs(lake: Any, round: int, stage: str) -> list[dict[str, Any]]:
    rows = lake.read("training_runs", filter=(pc.field("round") == round) & (pc.field("stage") == stage)).to_pylist()
    return sorted(rows, key=lambda r: (r["started_at"], r["run_id"]))


def recorded_specialist(lake: Any, round: int, base: str, name: str) -> dict[str, Any] | None:
    """The training_runs row of specialist `name` of round `round` grown from `base`, when its job finished."""
    from training.checkpoints import checkpoint_key as key

    for r in _runs(lake, round, "rl"):
        sp = json.loads(r["config"] or "{}").get("specialist") or {}
        if sp.get("name") == name and key(r["base_checkpoint"] or "") == key(base) and r["output_checkpoint"]:
            return r
    return None


def recorded_merge(
    lake: Any, round: int, base: str, ckpts: dict[str, str], alphas: dict[str, float] | None
) -> dict[str, Any] | None:
    """The training_runs row of a merge of exactly these specialists' checkpoints from `base` in round `round`, with
    these `alphas`, or chosen by a sweep when `alphas` is None (a merge run by hand with other weights is not it)."""
    from training.checkpoints import checkpoint_key as key

    want = {n: key(c) for n, c in ckpts.items()}
    for r in _runs(lake, round, "merge"):
        m = json.loads(r["config"] or "{}").get("merge") or {}
        got = {n: key(c) for n, c in (m.get("specialists") or {}).items()}
        swept = "sweep" in json.loads(r["metrics"] or "{}")
        how = swept if alphas is None else (not swept and m.get("alphas") == alphas)
        if how and got == want and key(r["base_checkpoint"] or "") == key(base) and r["output_checkpoint"]:
            return r
    return None


# ------------------------------------------------------------------------------------------------ the rl stage
def run_specialists(lake: Any, round: int, cfg: RoundConfig, base: str | None, tick: Tick) -> dict[str, Any]:
    """Every specialist's RL from `base` (the round's SFT checkpoint), then their merge; returns the rl stage's info
    (checkpoint = the merged one). Parts already done or recorded are not run again."""
    from training.envs import known_good
    from training.pipeline import run_training
    from training.runs import run_tags

    if base is None:
        raise ValueError("specialists grow from the round's SFT checkpoint, and this round has none")
    t0, f, runs = time.perf_counter(), cfg.flywheel, {}
    for world in worlds(cfg):
        name, path = world.name, ("specialists", world.name)
        st = part_status(lake, round, "rl", *path)
        if st.get("status") == "done" and st.get("base") == base:
            runs[name] = st
            continue
        desc = {"name": name, **world.describe()}
        row = recorded_specialist(lake, round, base, name)
        if row is not None:  # its job finished before a kill: adopt it
            mark_part(lake, round, "rl", path, "done", checkpoint=row["output_checkpoint"], run_id=row["run_id"],
                      base=base, world=desc, adopted=True)  # fmt: skip
            runs[name] = part_status(lake, round, "rl", *path)
            continue
        mark_part(lake, round, "rl", path, "running", base=base, world=desc)
        t1 = time.perf_counter()
        try:
            good = known_good(world.backend, world.training_tasks(4, 100_000 + round))
            with run_tags(specialist=desc):
                res, _ = run_training(lake, round, "rl", base, f, lambda i, loss, n=name: tick(specialist=n, i=i, loss=loss),
                                      rl_tasks=world.training_tasks, known_good=good)  # fmt: skip
        except BaseException as e:
            mark_part(lake, round, "rl", path, "failed", error=f"{type(e).__name__}: {e}"[:500])
            raise
        mark_part(lake, round, "rl", path, "done", checkpoint=res.output_checkpoint, run_id=res.run_id,
                  seconds=round_s(time.perf_counter() - t1))  # fmt: skip
        runs[name] = part_status(lake, round, "rl", *path)
    merged = _merge(lake, round, cfg, base, {n: r["checkpoint"] for n, r in runs.items()})
    info = {"mode": "specialists", "base": base,
            "specialists": [{"name": n, **r["world"], "checkpoint": r["checkpoint"], "run_id": r["run_id"]}
                            for n, r in runs.items()],
            "merge": {k: merged.get(k) for k in ("checkpoint", "run_id", "alphas", "sweep")}}  # fmt: skip
    update_round(lake, round, breakdown={"rl": info})
    return {"checkpoint": merged["checkpoint"], "base": base, "run_id": merged["run_id"], "mode": "specialists",
            "specialists": {n: r["checkpoint"] for n, r in runs.items()}, "alphas": merged["alphas"],
            "wall_s": round_s(time.perf_counter() - t0)}  # fmt: skip


def round_s(x: float) -> float:
    return float(f"{x:.2f}")


def _merge(lake: Any, round: int, cfg: RoundConfig, base: str, ckpts: dict[str, str]) -> dict[str, Any]:
    """The merge part: the configured alphas (equal when none are given), or the sweep's choice."""
    from training.merge import Specialist, merge_job, sweep

    m, f = cfg.merge, cfg.flywheel
    given = {s.name: float(s.alpha) for s in cfg.specialists if s.alpha is not None}
    alphas = None if m.sweep else (given or {n: 1.0 / len(ckpts) for n in ckpts})
    st = part_status(lake, round, "rl", "merge")
    if st.get("status") == "done" and st.get("specialists") == ckpts:
        return st
    row = recorded_merge(lake, round, base, ckpts, alphas)
    if row is not None:
        conf, met = json.loads(row["config"] or "{}")["merge"], json.loads(row["metrics"] or "{}")
        mark_part(lake, round, "rl", ("merge",), "done", checkpoint=row["output_checkpoint"], run_id=row["run_id"],
                  specialists=ckpts, alphas=conf["alphas"], sweep=_kept(met), adopted=True)  # fmt: skip
        return part_status(lake, round, "rl", "merge")
    mark_part(lake, round, "rl", ("merge",), "running", specialists=ckpts)
    t0 = time.perf_counter()
    try:
        if m.sweep:
            ws = worlds(cfg)
            held = {w.name: w.heldout_tasks(cfg.eval_per_cell) for w in ws}
            (na, ca), (nb, cb) = list(ckpts.items())
            _, _, res = sweep(lake, base, (na, ca), (nb, cb), held, f.eval, f.prompt, tuple(m.grid), round,
                              objective=m.objective)  # fmt: skip
        else:
            assert alphas is not None
            res, _ = merge_job(lake, base, [Specialist(n, c, alphas[n]) for n, c in ckpts.items()], round)
    except BaseException as e:
        mark_part(lake, round, "rl", ("merge",), "failed", error=f"{type(e).__name__}: {e}"[:500])
        raise
    mark_part(lake, round, "rl", ("merge",), "done", checkpoint=res.output_checkpoint, run_id=res.run_id,
              alphas=res.config["merge"]["alphas"], sweep=_kept(res.metrics), seconds=round_s(time.perf_counter() - t0))  # fmt: skip
    return part_status(lake, round, "rl", "merge")


def _kept(metrics: dict[str, Any]) -> dict[str, Any] | None:
    s = metrics.get("sweep")
    return {"objective": s["objective"], "kept_alpha": s["kept_alpha"], "first": s["first"]} if s else None


# ------------------------------------------------------------------------------------------------ evaluation
def mixed_eval(
    lake: Any, round: int, cfg: RoundConfig, policy: Any, done: dict[str, bool], tick: Tick
) -> dict[str, Any]:
    """The merged model on the mixed held-out set (training.envs.mixed_heldout: each world's held-out tasks, and
    composed two-world tasks where the sandbox composes them), per part and overall with 95% intervals. `done`
    holds outcomes already measured on the same model (the round's held-out evaluation, by task id), which are not
    played again. With `merge.eval_members`, the common checkpoint and each specialist are evaluated on the same
    tasks beside it."""
    from training.checkpoints import fetch
    from training.evaluate import Rate, evaluate

    f = cfg.flywheel
    sets = mixed_heldout(worlds(cfg), cfg.eval_per_cell, cfg.merge.mixed_per_cell)
    union = list({t.task_id: t for ts in sets.values() for t in ts}.values())

    def rates(outcome: dict[str, bool]) -> dict[str, Any]:
        out = {k: asdict(Rate.of([outcome[t.task_id] for t in ts])) for k, ts in sets.items()}
        return out | {"overall": asdict(Rate.of([outcome[t.task_id] for t in union]))}

    def play(p: Any, tasks: list[Any]) -> dict[str, bool]:
        if not tasks:
            return {}
        r = evaluate(p, tasks, f.eval, f.prompt, lambda n: tick(n=n, part="mixed held-out"))
        return {t.task_id: ok for t, ok in zip(tasks, r.passed)}

    known = dict(done)
    known |= play(policy, [t for t in union if t.task_id not in known])
    out: dict[str, Any] = {"policy_version": getattr(policy, "version", None), "rates": rates(known),
                           "composed": "composed" in sets, "n": len(union)}  # fmt: skip
    if cfg.merge.eval_members:
        rl = stage_status(lake, round).get("rl") or {}
        members = {"base": rl.get("base")} | {n: s.get("checkpoint") for n, s in (rl.get("specialists") or {}).items()}
        out["members"] = {n: rates(play(fetch(lake, ck), union)) for n, ck in members.items() if ck}
    return out
