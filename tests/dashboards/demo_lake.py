"""A demo lake for the dashboard tests and benchmark: realistic synthetic rows in every table, written through
Lake.append / Lake.upsert (so they pass the real schema checks), built with numpy/pyarrow so that a million
episodes take seconds rather than minutes.

The numbers follow the flywheel's story: pass rates rise round over round (less on hard levels), piles grow,
override rates fall, losses decay. Known totals are returned so tests can compare the page against them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from statsmodels.stats.proportion import proportion_confint

from core import PIPELINE_VERSION
from schemas.tables import CT, SFT, STEP
from storage.lake import Lake

SOURCES = np.array(["rollout", "think_aloud", "interactive"])
FAMILIES = np.array(["click_button", "fill_form", "checkboxes", "menu_path", "scroll_find", "popup_dismiss"])
ACTIONS = np.array(
    [
        "click(point='<point>120 48</point>')",
        "type(content='hello world')",
        "scroll(point='<point>400 300</point>', direction='down')",
        "hotkey(key='ctrl s')",
        "finished(content='done')",
    ]
)
STRUCTURAL = np.array(["bad_grammar", "off_screen", "non_monotonic_time", "missing_thought", "no_screenshot"])
OUTCOME = np.array(["env_failed", "answer_mismatch", "judge_rejected"])
ERRORS = np.array(
    [
        "json_decode",
        "schema_mismatch",
        "audio_undecodable",
        "missing_screenshot",
        "path_traversal",
        "events_unparseable",
        "size_limit",
    ]
)
T0 = datetime(2025, 1, 6, tzinfo=UTC)


@dataclass(frozen=True)
class DemoTotals:
    rounds: int
    episodes: int
    sft: int
    ct: int
    quarantined: int
    sessions: int
    training_runs: int
    audits: int


def _ts(n: int, base: datetime, spread_s: float, rng: np.random.Generator) -> pa.Array:
    us = (base.timestamp() + rng.uniform(0, spread_s, n)) * 1e6
    return pa.array(us.astype("int64"), pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def _steps(n_steps: np.ndarray, rng: np.random.Generator, with_thoughts: np.ndarray) -> pa.ListArray:
    """A list<STEP> column: n_steps[i] steps for episode i, only the commonly used fields filled."""
    total = int(n_steps.sum())
    offsets = np.concatenate([[0], np.cumsum(n_steps)]).astype(np.int32)
    index = np.arange(total, dtype=np.int32) - np.repeat(offsets[:-1], n_steps)
    acts = ACTIONS[rng.integers(0, len(ACTIONS), total)]
    thought_on = np.repeat(with_thoughts, n_steps)
    thoughts = np.where(thought_on, "I need to open the menu first", "")
    filled = {
        "index": pa.array(index, pa.int32()),
        "t_start": pa.array(index * 2.0),
        "t_end": pa.array(index * 2.0 + 1.5),
        "thought": pa.array(thoughts),
        "action": pa.array(acts),
        "action_type": pa.array(np.char.partition(acts.astype(str), "(")[:, 0]),
    }
    arrays = [filled.get(f.name, pa.nulls(total, f.type)) for f in STEP]
    values = pa.StructArray.from_arrays(arrays, fields=list(STEP))
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def _pass_prob(rnd: np.ndarray, level: np.ndarray, rounds: int) -> np.ndarray:
    progress = (rnd - 1) / max(rounds - 1, 1)
    return np.clip(0.30 + 0.45 * progress - 0.07 * (level - 1) + 0.05 * progress * (level - 1), 0.02, 0.97)


def _wilson(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return proportion_confint(k, np.maximum(n, 1), alpha=0.05, method="wilson")


def build_demo_lake(
    lake: Lake,
    *,
    rounds: int = 6,
    episodes: int = 3000,
    seed: int = 0,
    chunks: int = 1,
    quarantined: int = 40,
    verdicts: bool = True,
) -> DemoTotals:
    """Fill every table of `lake` with a consistent synthetic history of `rounds` rounds and `episodes` episodes.

    `chunks` splits the episode-sized tables into that many appends (Delta commits), as a lake that grew round
    by round would have.
    """
    rng = np.random.default_rng(seed)
    n = episodes
    rnd = np.sort(rng.integers(1, rounds + 1, n)).astype(np.int32)
    rnd[:rounds] = np.arange(1, rounds + 1)  # every round has at least one episode
    rnd.sort()
    src = SOURCES[rng.choice(3, n, p=[0.8, 0.1, 0.1])]
    level = rng.integers(1, 6, n).astype(np.int32)
    family = FAMILIES[rng.integers(0, len(FAMILIES), n)]
    passed = rng.random(n) < _pass_prob(rnd, level, rounds)
    n_steps = rng.integers(1, 4, n).astype(np.int32)
    ids = np.array([f"{seed:08x}{i:024x}" for i in range(n)])
    n_sessions_human = max(1, n // 50)
    session_of = np.where(
        src == "rollout", "rollout-r" + rnd.astype(str), "sess-" + rng.integers(0, n_sessions_human, n).astype(str)
    )
    reasons_fail = np.where(
        rng.random(n) < 0.5, STRUCTURAL[rng.integers(0, len(STRUCTURAL), n)], OUTCOME[rng.integers(0, len(OUTCOME), n)]
    )
    failed_validator = np.where(np.isin(reasons_fail, STRUCTURAL), "structural", "outcome")

    bounds = np.linspace(0, n, chunks + 1).astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        sl = slice(a, b)
        m = b - a
        cols = {
            "episode_id": pa.array(ids[sl]),
            "session_id": pa.array(session_of[sl]),
            "source": pa.array(src[sl]),
            "round": pa.array(rnd[sl], pa.int32()),
            "task_id": pa.array(np.char.add("task-", (np.arange(a, b) % 500).astype(str))),
            "task_family": pa.array(family[sl]),
            "difficulty": pa.array(level[sl], pa.int32()),
            "instruction": pa.array(np.char.add("Complete the task in family ", family[sl].astype(str))),
            "group": pa.array(
                np.where(src[sl] == "rollout", "model", np.where(rng.random(m) < 0.5, "expert", "novice"))
            ),
            "policy_version": pa.array(np.char.add("policy-r", (rnd[sl] - 1).astype(str))),
            "outcome": pa.array(np.where(passed[sl], "finished", "step_limit")),
            "env_passed": pa.array(passed[sl]),
            "n_steps": pa.array(n_steps[sl], pa.int32()),
            "steps": _steps(n_steps[sl], rng, src[sl] != "rollout"),
            "pipeline_version": pa.array(np.full(m, PIPELINE_VERSION)),
            "ingested_at": _ts(m, T0, 86400 * rounds, rng),
        }
        ep = pa.table(cols)
        lake.append("episodes", ep)
        ok = pa.array(passed[sl])
        sft = ep.filter(ok)
        sft = sft.append_column("round_routed", sft.column("round"))
        ct = ep.filter(pc.invert(ok))
        ct = ct.append_column("round_routed", ct.column("round"))
        ct = ct.append_column("reasons", pa.array([[r] for r in reasons_fail[sl][~passed[sl]]], pa.list_(pa.string())))
        lake.append("sft", sft.select([c for c in SFT.names if c in sft.column_names]))  # thin pile rows
        lake.append("ct", ct.select([c for c in CT.names if c in ct.column_names]))
        if verdicts:
            lake.append(
                "verdicts", _verdicts(ids[sl], rnd[sl], passed[sl], reasons_fail[sl], failed_validator[sl], rng)
            )
        del ep, sft, ct

    n_pass = np.bincount(rnd, weights=passed, minlength=rounds + 1)[1:].astype(np.int64)
    n_new = np.bincount(rnd, minlength=rounds + 1)[1:].astype(np.int64)
    lake.upsert("rounds", _rounds(rounds, n_new, n_pass, rnd, level, passed, src, family, rng))
    runs = _training_runs(rounds, rng)
    lake.append("training_runs", runs)
    sessions = _sessions(rounds, n_sessions_human, rng)
    lake.append("sessions", sessions)
    lake.append("quarantine", _quarantine(quarantined, rounds, rng))
    audits = _audits(ids[passed], rnd[passed], rng)
    lake.append("audits", audits)
    lake.append("dq_results", _dq(rounds, rng))
    return DemoTotals(
        rounds,
        n,
        int(passed.sum()),
        int((~passed).sum()),
        quarantined,
        sessions.num_rows,
        runs.num_rows,
        audits.num_rows,
    )


def _verdicts(
    ids: np.ndarray,
    rnd: np.ndarray,
    passed: np.ndarray,
    reason: np.ndarray,
    validator: np.ndarray,
    rng: np.random.Generator,
) -> pa.Table:
    """Two verdicts per episode (structural, outcome); a failed episode fails exactly one of them."""
    m = len(ids)
    parts = []
    for name in ("structural", "outcome"):
        fails = ~passed & (validator == name)
        parts.append(
            pa.table(
                {
                    "episode_id": pa.array(ids),
                    "round": pa.array(rnd, pa.int32()),
                    "validator": pa.array(np.full(m, name)),
                    "version": pa.array(np.full(m, "1")),
                    "passed": pa.array(~fails),
                    "reason": pa.array(np.where(fails, reason, "ok")),
                    "score": pa.array(np.where(fails, 0.0, 1.0)),
                    "validated_at": _ts(m, T0, 3600, rng),
                }
            )
        )
    return pa.concat_tables(parts)


def _rounds(
    rounds: int,
    n_new: np.ndarray,
    n_pass: np.ndarray,
    rnd: np.ndarray,
    level: np.ndarray,
    passed: np.ndarray,
    src: np.ndarray,
    family: np.ndarray,
    rng: np.random.Generator,
) -> pa.Table:
    r = np.arange(1, rounds + 1)
    lo, hi = _wilson(n_pass, n_new)
    eval_n = np.full(rounds, 300)
    eval_rate = np.clip(0.22 + 0.5 * (r - 1) / max(rounds - 1, 1) + rng.normal(0, 0.015, rounds), 0.01, 0.99)
    eval_k = np.round(eval_rate * eval_n)
    elo, ehi = _wilson(eval_k, eval_n)
    sft_size, ct_size = np.cumsum(n_pass), np.cumsum(n_new - n_pass)
    breakdowns = []
    for i in r:
        sel = rnd == i
        per = {}
        for key, col in (("by_source", src), ("by_family", family), ("by_level", level)):
            per[key] = {
                str(v): {"n": int((sel & (col == v)).sum()), "n_pass": int((sel & passed & (col == v)).sum())}
                for v in np.unique(col[sel])
            }
        ev = {}
        for lv in range(1, 6):
            en = 60
            rate = float(np.clip(eval_rate[i - 1] + 0.12 * (3 - lv), 0.01, 0.99))
            ev[str(lv)] = {"n": en, "n_pass": int(round(rate * en)), "pass_rate": round(rate, 4)}
        per["eval"] = {"by_level": ev}  # the shape validators/routing.py uses for by_source / by_family
        per.update(_rl_mode(int(i), rounds))
        breakdowns.append(json.dumps(per))
    stages = ("ingest", "route", "ct", "sft", "rl", "eval")
    stage_status = [
        json.dumps(
            {
                s: {
                    "status": "done",
                    "seconds": round(float(rng.uniform(20, 90) * (4 if s in ("sft", "rl") else 1)), 1),
                }
                for s in stages
                if s != "ct" or i % 2 == 1
            }
        )
        for i in r
    ]
    return pa.table(
        {
            "round": pa.array(r, pa.int32()),
            "n_new": pa.array(n_new),
            "n_pass": pa.array(n_pass),
            "n_fail": pa.array(n_new - n_pass),
            "pass_rate": pa.array(n_pass / np.maximum(n_new, 1)),
            "pass_rate_lo": pa.array(lo),
            "pass_rate_hi": pa.array(hi),
            "eval_n": pa.array(eval_n, pa.int64()),
            "eval_pass_rate": pa.array(eval_k / eval_n),
            "eval_pass_rate_lo": pa.array(elo),
            "eval_pass_rate_hi": pa.array(ehi),
            "sft_size": pa.array(sft_size.astype(np.int64)),
            "ct_size": pa.array(ct_size.astype(np.int64)),
            "policy_version": pa.array([f"policy-r{i}" for i in r]),
            "stage_status": pa.array(stage_status),
            "breakdown": pa.array(breakdowns),
            "updated_at": _ts(rounds, T0, 3600, rng),
        }
    )


def _rl_mode(i: int, rounds: int) -> dict:
    """How round i's RL ended (flows/specialists.py's breakdown entries): joint, except the last round, which ran two
    specialists and their merge, evaluated on the mixed held-out set."""
    if i < rounds:
        return {"rl": {"mode": "joint", "checkpoint": f"objects/ab/ckpt-{i}-rl.pt"}}
    sp = [{"name": n, "env": "sandbox", "families": f, "levels": None, "checkpoint": f"objects/ab/ckpt-{i}-{n}.pt",
           "run_id": f"run-{i}-{n}"} for n, f in (("forms", ["fill_form", "checkboxes"]), ("menus", ["menu_path"]))]  # fmt: skip
    rl = {"mode": "specialists", "base": f"objects/ab/ckpt-{i}-sft.pt", "specialists": sp,
          "merge": {"checkpoint": f"objects/ab/ckpt-{i}-merge.pt", "run_id": f"run-{i}-merge",
                    "alphas": {"forms": 0.5, "menus": 0.5}, "sweep": None}}  # fmt: skip
    rates = {"forms": _rate(14, 20), "menus": _rate(9, 20), "composed": _rate(11, 40), "overall": _rate(34, 80)}
    return {"rl": rl, "mixed": {"rates": rates, "composed": True, "n": 80}}


def _rl_iterations(r: int, rng: np.random.Generator, n: int = 12) -> list[dict]:
    """Per-update RL metrics of one job (training/rl.py's keys): the reward climbs, the entropy slowly falls."""
    out = []
    for i in range(n):
        p = min(0.95, 0.2 + 0.05 * r + 0.03 * i + float(rng.normal(0, 0.02)))
        out.append({"iter": i, "reward_mean": p, "pass_rate": p, "entropy": 0.6 - 0.02 * i, "clip_low": 0.01,
                    "clip_high": 0.02, "kl": 0.003, "all_equal_share": 0.3, "value_loss": 0.2, "age_mean": 0.0,
                    "steps_per_episode": 3.0, "gen_tokens_per_s": 900.0})  # fmt: skip
    return out


def _training_runs(rounds: int, rng: np.random.Generator) -> pa.Table:
    rows = []
    for r in range(1, rounds + 1):
        for stage in (["ct"] if r % 2 == 1 else []) + ["sft", "rl"]:
            steps = int(rng.integers(40, 120))
            start = {"ct": 3.2, "sft": 2.4, "rl": 0.9}[stage] / (1 + 0.1 * r)
            t = np.arange(steps)
            losses = start * (0.35 + 0.65 * np.exp(-t / (steps / 4))) + rng.normal(0, 0.02 * start, steps)
            tokens = int(steps * rng.integers(3000, 5000))
            metrics = {"iterations": _rl_iterations(r, rng)} if stage == "rl" else {}
            rows.append(
                {
                    "run_id": f"run-{r}-{stage}",
                    "round": r,
                    "stage": stage,
                    "backend": "builtin",
                    "base_checkpoint": f"ckpt-{r - 1}",
                    "output_checkpoint": f"objects/ab/ckpt-{r}-{stage}.pt",
                    "pile_version": r,
                    "samples": steps * 16,
                    "tokens": tokens,
                    "steps": steps,
                    "loss_first": float(losses[0]),
                    "loss_last": float(losses[-1]),
                    "losses": losses.tolist(),
                    "metrics": json.dumps(metrics),
                    "config": "{}",
                    "wall_s": float(tokens / rng.uniform(900, 1300)),
                    "started_at": T0 + timedelta(days=r, hours={"ct": 1, "sft": 2, "rl": 3}[stage]),
                }
            )
    rows.append(_merge_run(rounds, rng))
    return pa.Table.from_pylist(rows)


def _rate(k: int, n: int) -> dict:
    from core.stats import wilson

    lo, hi = wilson(k, n)
    return {"n": n, "k": k, "rate": k / n, "lo": lo, "hi": hi}


def _merge_run(r: int, rng: np.random.Generator) -> dict:
    """A merge sweep (training/merge.py's metrics.sweep) of two specialists over two worlds, after round `r`."""
    n = 80
    points = [{"alpha": a, "rates": {"forms": _rate(int(n * (0.3 + 0.3 * a)), n),
                                     "menus": _rate(int(n * (0.6 - 0.25 * a)), n)}}
              for a in (0.0, 0.25, 0.5, 0.75, 1.0)]  # fmt: skip
    sweep = {"objective": "worst world", "first": "forms", "second": "menus", "kept_alpha": 0.5,
             "base": {"forms": _rate(20, n), "menus": _rate(30, n)}, "points": points}  # fmt: skip
    return {"run_id": f"run-{r}-merge", "round": r, "stage": "merge", "backend": "builtin",
            "base_checkpoint": f"ckpt-{r - 1}", "output_checkpoint": f"objects/ab/ckpt-{r}-merge.pt",
            "pile_version": None, "samples": 0, "tokens": 0, "steps": 0, "loss_first": None, "loss_last": None,
            "losses": [], "metrics": json.dumps({"sweep": sweep}),
            "config": json.dumps({"merge": {"alphas": {"forms": 0.5, "menus": 0.5}}}),
            "wall_s": float(rng.uniform(20, 40)), "started_at": T0 + timedelta(days=r, hours=5)}  # fmt: skip


def _sessions(rounds: int, n_human: int, rng: np.random.Generator) -> pa.Table:
    m = n_human
    source = np.where(rng.random(m) < 0.5, "think_aloud", "interactive")
    group = np.where(rng.random(m) < 0.4, "expert", "novice")
    rnd = rng.integers(1, rounds + 1, m).astype(np.int32)
    expert = group == "expert"
    n_actions = rng.integers(8, 60, m).astype(np.int32)
    progress = (rnd - 1) / max(rounds - 1, 1)
    think = source == "think_aloud"
    status = np.where(rng.random(m) < 0.97, "landed", "quarantined")
    return pa.table(
        {
            "session_id": pa.array([f"sess-{i}" for i in range(m)]),
            "source": pa.array(source),
            "annotator": pa.array([f"ann-{i % 17:02d}" for i in range(m)]),
            "group": pa.array(group),
            "status": pa.array(status),
            "round": pa.array(rnd, pa.int32()),
            "n_episodes": pa.array(rng.integers(1, 6, m), pa.int32()),
            "n_actions": pa.array(n_actions),
            "duration_s": pa.array(rng.uniform(60, 900, m)),
            "thought_share": pa.array(
                np.where(think, np.clip(np.where(expert, 0.88, 0.7) + rng.normal(0, 0.05, m), 0, 1), None)
            ),
            "speech_s": pa.array(np.where(think, rng.uniform(30, 400, m), None)),
            "asr_confidence": pa.array(
                np.where(think, np.clip(np.where(expert, 0.86, 0.78) + rng.normal(0, 0.04, m), 0, 1), None)
            ),
            "override_rate": pa.array(
                np.where(~think, np.clip(0.55 - 0.35 * progress + rng.normal(0, 0.05, m), 0, 1), None)
            ),
            "pipeline_version": pa.array(np.full(m, PIPELINE_VERSION)),
            "ingested_at": _ts(m, T0, 86400 * rounds, rng),
        }
    )


def _quarantine(n: int, rounds: int, rng: np.random.Generator) -> pa.Table:
    et = ERRORS[np.minimum(rng.geometric(0.35, n) - 1, len(ERRORS) - 1)]
    return pa.table(
        {
            "quarantine_id": pa.array([f"q-{i}" for i in range(n)]),
            "source": pa.array(SOURCES[rng.integers(0, 3, n)]),
            "landed_uri": pa.array([f"landing/bundle-{i}.zip" for i in range(n)]),
            "error_type": pa.array(et),
            "error": pa.array(np.char.add("could not read input: ", et.astype(str))),
            "round": pa.array(rng.integers(1, rounds + 1, n), pa.int32()),
            "quarantined_at": _ts(n, T0, 86400 * rounds, rng),
        }
    )


def _audits(ids: np.ndarray, rnd: np.ndarray, rng: np.random.Generator) -> pa.Table:
    rows = []
    for r in np.unique(rnd):
        pool = ids[rnd == r]
        pick = rng.choice(pool, min(40, len(pool)), replace=False)
        good = rng.random(len(pick)) < 0.9
        for i, (e, g) in enumerate(zip(pick, good)):
            rows.append(
                {
                    "audit_id": f"a-{r}-{i}",
                    "round": int(r),
                    "episode_id": str(e),
                    "seed": 7,
                    "auditor": "aud-1",
                    "verdict": "good" if g else "bad",
                    "recorded_at": T0 + timedelta(days=int(r), minutes=i),
                }
            )
    return pa.Table.from_pylist(rows) if rows else pa.table({})


def _dq(rounds: int, rng: np.random.Generator) -> pa.Table:
    rows = []
    for r in range(1, rounds + 1):
        for suite in ("episodes_batch", "steps_batch"):
            ok = bool(rng.random() < 0.85)
            rows.append(
                {
                    "result_id": f"dq-{r}-{suite}",
                    "round": r,
                    "batch_id": f"batch-{r}",
                    "suite": suite,
                    "success": ok,
                    "n_expectations": 12,
                    "n_failed": 0 if ok else int(rng.integers(1, 3)),
                    "overridden": (not ok) and bool(rng.random() < 0.5),
                    "details": "{}",
                    "validated_at": T0 + timedelta(days=r),
                }
            )
    return pa.Table.from_pylist(rows)
