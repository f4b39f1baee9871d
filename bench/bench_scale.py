"""Scale: a lake of BENCH_SCALE_EPISODES episodes (default 10,000,000) over 50 rounds, through the real code.

Each round: synthetic rollouts with known truth (validators/synthetic.py, columnar) are written as rollout Parquet
files (the `flywheel.rollout/1` format the sandbox and rejection sampling write) in chunks, ingested with the real
reader (ingest.rollouts.ingest_rollout_file: parse, action parsing, content-hash ids, idempotent appends), and
routed with the real rule and the bundled routing policy (validators.routing.route_round: GX suite, every rollout
validator, verdicts, piles, rounds row). At each measurement point (BENCH_SCALE_POINTS, default 1M, 2M, 5M, 10M up
to the total) it times: every SQL example of docs/queries.md, an audit sample (200 of the last round's SFT pile),
the dashboard render, `flywheel check`, and the lake's size on disk.

Figures compare the largest point reached against the first (1M): rates should not drop, times should grow no
faster than the number of episodes (ratio = linear extrapolation / measured time; >= 1 is linear or better). The
rates compare rounds run minutes apart, so each round also times a fixed Parquet write and read (`reference_seconds`)
and the rate figures are corrected by it (rate x reference time); the raw ratio stays in the figure's note.

Resumable: the lake lives in BENCH_SCALE_DIR (default <tmp>/flywheel-bench-scale-<N>) with a state file; a run
that is stopped continues from the last finished round (ingestion is idempotent anyway). The folder is deleted
after a complete run unless BENCH_SCALE_KEEP=1.

Env: BENCH_SCALE_EPISODES (total), BENCH_SCALE_ROUNDS (50), BENCH_SCALE_STEPS (steps per episode, 8),
BENCH_SCALE_POINTS (comma list), BENCH_SCALE_CHUNK (episodes per ingested file, 200,000), BENCH_SCALE_DIR,
BENCH_SCALE_KEEP. BENCH_QUICK=1: 200,000 episodes over 10 rounds, points 100k and 200k.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import Figure, console, quick

DOC = Path(__file__).resolve().parents[1] / "docs" / "queries.md"


def _env_int(name: str, default: int) -> int:
    return int(float(os.environ.get(name, default)))


def config() -> dict[str, Any]:
    if quick():
        total, rounds, points = 200_000, 10, [100_000, 200_000]
    else:
        total = _env_int("BENCH_SCALE_EPISODES", 10_000_000)
        rounds = _env_int("BENCH_SCALE_ROUNDS", 50)
        points = [1_000_000, 2_000_000, 5_000_000, 10_000_000]
    if os.environ.get("BENCH_SCALE_POINTS"):
        points = [int(float(p)) for p in os.environ["BENCH_SCALE_POINTS"].split(",")]
    points = sorted({p for p in points if p <= total} | {total})
    return {
        "total": total,
        "rounds": rounds,
        "steps": _env_int("BENCH_SCALE_STEPS", 8),
        "chunk": _env_int("BENCH_SCALE_CHUNK", 200_000),
        "points": points,
        "dir": os.environ.get("BENCH_SCALE_DIR") or str(Path(tempfile.gettempdir()) / f"flywheel-bench-scale-{total}"),
    }


# --------------------------------------------------------------------------------------------- data
def to_rollout_file(episodes: pa.Table, path: Path) -> Path:
    """Synthetic episodes -> a rollout Parquet file (ROLLOUT schema), columnar."""
    from ingest.formats.rollouts import ROLLOUT, ROLLOUT_STEP

    steps = episodes.column("steps").combine_chunks()
    flat = steps.flatten()
    arrays = [
        flat.field(f.name).cast(f.type) if f.name in flat.type.names else pa.nulls(len(flat), f.type)
        for f in ROLLOUT_STEP
    ]
    st = pa.ListArray.from_arrays(steps.offsets, pa.StructArray.from_arrays(arrays, fields=list(ROLLOUT_STEP)))
    cols = {
        "task_id": episodes.column("task_id"),
        "group_id": episodes.column("task_id"),
        "attempt": pc.cast(episodes.column("attempt"), pa.int64()),
        "policy_version": episodes.column("policy_version"),
        "instruction": episodes.column("instruction"),
        "task_family": episodes.column("task_family"),
        "screen_width": pc.cast(episodes.column("screen_width"), pa.int64()),
        "screen_height": pc.cast(episodes.column("screen_height"), pa.int64()),
        "steps": st,
        "reward": episodes.column("env_reward"),
        "passed": episodes.column("env_passed"),
        "termination": pa.array(np.full(episodes.num_rows, "finished", dtype=object), pa.string()),
        "final_answer": episodes.column("final_answer"),
    }
    n = episodes.num_rows
    t = pa.Table.from_arrays([cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in ROLLOUT], schema=ROLLOUT)
    pq.write_table(t, path, compression="snappy")
    return path


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)


def lake_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def reference_seconds(table: pa.Table, path: Path, reps: int = 3) -> float:
    """The host's speed now: the median time of writing a fixed episodes table to Parquet and reading it back (what a
    round's ingest and routing mostly do). A round's time divided by it compares rounds run minutes apart on a host
    whose speed drifts: a slow spell stretches both."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        pq.write_table(table, path)
        pq.read_table(path)
        times.append(time.perf_counter() - t0)
    path.unlink(missing_ok=True)
    return float(np.median(times))


# --------------------------------------------------------------------------------------------- measure
def measure(lake, n_episodes: int, last_round: int, workdir: Path) -> dict[str, Any]:
    from dashboards.render import render_dashboard
    from flywheel.people.audit import sample
    from storage.query import run_query
    from validators.lake_check import check_lake

    out: dict[str, Any] = {"episodes": n_episodes, "round": last_round, "queries": {}}
    for i, q in enumerate(sql_blocks()):
        t0 = time.perf_counter()
        rows = run_query(lake, q).num_rows
        out["queries"][f"q{i + 1:02d}"] = {"s": time.perf_counter() - t0, "rows": rows, "sql": " ".join(q.split())[:70]}
    out["queries_s"] = sum(v["s"] for v in out["queries"].values())
    t0 = time.perf_counter()
    s = sample(lake, last_round, 200, seed=1)
    out["audit_sample_s"] = time.perf_counter() - t0
    out["audit_drawn"] = s.episodes.height
    t0 = time.perf_counter()
    render_dashboard(lake, workdir / "dashboard.html")
    out["dashboard_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rep = check_lake(lake)
    out["check_s"] = time.perf_counter() - t0
    out["check_ok"] = rep.ok
    out["check_violations"] = [v.line() for v in rep.violations]
    out["lake_bytes"] = lake_bytes(Path(lake.uri.root))
    out["rows"] = {t: lake.count(t) for t in ("episodes", "sft", "ct", "verdicts")}
    return out


# --------------------------------------------------------------------------------------------- build
def build(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build (or continue building) the lake; measure at each point; return the state."""
    import great_expectations  # noqa: F401 - a one-off import, not a per-round cost

    from ingest.rollouts import ingest_rollout_file
    from storage import Lake
    from validators.routing import route_round
    from validators.synthetic import screenshot_pool, synthetic_rollouts

    root = Path(cfg["dir"])
    root.mkdir(parents=True, exist_ok=True)
    state_path = root / "bench_state.json"
    state: dict[str, Any] = (
        json.loads(state_path.read_text()) if state_path.exists() else {"cfg": cfg, "rounds": {}, "points": {}}
    )
    if (
        state["cfg"]["total"] != cfg["total"]
        or state["cfg"]["rounds"] != cfg["rounds"]
        or state["cfg"]["steps"] != cfg["steps"]
    ):
        raise RuntimeError(f"{root} holds a run with other settings ({state['cfg']}); remove it or set BENCH_SCALE_DIR")
    save = lambda: state_path.write_text(json.dumps(state, indent=1))
    lake = Lake.open(root / "lake", create=True)
    pool = screenshot_pool(lake, k=64)
    reference = synthetic_rollouts(20_000, 0, screenshots=pool, steps=cfg["steps"], seed=3)
    per_round = cfg["total"] // cfg["rounds"]
    points = list(cfg["points"])
    work = root / "work"
    work.mkdir(exist_ok=True)
    done = sum(v["n"] for v in state["rounds"].values())
    for r in range(1, cfg["rounds"] + 1):
        n = per_round if r < cfg["rounds"] else cfg["total"] - per_round * (cfg["rounds"] - 1)
        if str(r) not in state["rounds"]:
            t_ing = 0.0
            for start in range(0, n, cfg["chunk"]):
                k = min(cfg["chunk"], n - start)
                eps = synthetic_rollouts(k, r, screenshots=pool, steps=cfg["steps"], seed=7, start=start,
                                         true_pass_share=min(0.3 + 0.01 * r, 0.8), leniency=0.05, bad_share=0.02)  # fmt: skip
                f = to_rollout_file(eps, work / f"r{r}-{start}.parquet")
                del eps
                t0 = time.perf_counter()
                ingest_rollout_file(lake, f, round=r, parquet_batch_rows=cfg["chunk"])
                t_ing += time.perf_counter() - t0
                f.unlink()
            t0 = time.perf_counter()
            summary = route_round(lake, r)
            t_route = time.perf_counter() - t0
            state["rounds"][str(r)] = {
                "n": n,
                "ingest_s": t_ing,
                "route_s": t_route,
                "ref_s": reference_seconds(reference, work / "reference.parquet"),
                "n_new": summary.n_new,
                "pass_rate": summary.pass_rate,
            }
            done += n
            save()
            console.print(f"round {r}/{cfg['rounds']}: {n:,} episodes (total {done:,}); ingest {n / t_ing:,.0f}/s, "
                          f"route {n / t_route:,.0f}/s, pass rate {summary.pass_rate:.3f}")  # fmt: skip
        total_so_far = sum(v["n"] for v in list(state["rounds"].values()))
        for p in points:
            if str(p) in state["points"] or total_so_far < p:
                continue
            prev = max([int(q) for q in state["points"]] + [0])
            seg_rounds, cum = [], 0
            for k in sorted(state["rounds"], key=int):
                cum += state["rounds"][k]["n"]
                if int(k) <= r and cum > prev:  # the rounds since the previous point
                    seg_rounds.append(state["rounds"][k])
            m = measure(lake, total_so_far, r, work)
            m["ingest_rate"] = sum(v["n"] for v in seg_rounds) / sum(v["ingest_s"] for v in seg_rounds)
            m["route_rate"] = sum(v["n"] for v in seg_rounds) / sum(v["route_s"] for v in seg_rounds)
            refs = [v.get("ref_s") for v in seg_rounds]
            m["ref_s"] = float(np.mean(refs)) if all(refs) else None  # a state file from before the reference: none
            state["points"][str(p)] = m
            save()
            console.print(f"point {total_so_far:,}: ingest {m['ingest_rate']:,.0f}/s, route {m['route_rate']:,.0f}/s, "
                          f"queries {m['queries_s']:.1f} s, audit {m['audit_sample_s']:.2f} s, dashboard {m['dashboard_s']:.1f} s, "
                          f"check {m['check_s']:.1f} s ({'ok' if m['check_ok'] else m['check_violations']}), "
                          f"lake {m['lake_bytes'] / 2**30:.2f} GiB")  # fmt: skip
    return state


def figures(state: dict[str, Any]) -> list[Figure]:
    pts = sorted(state["points"].values(), key=lambda m: m["episodes"])
    if len(pts) < 2:
        return []
    a, b = pts[0], pts[-1]
    grow = b["episodes"] / a["episodes"]
    note = f"{a['episodes']:,} -> {b['episodes']:,} episodes ({grow:.1f}x)"
    figs = [_rate_figure(a, b, "ingest_rate", "ingest", note), _rate_figure(a, b, "route_rate", "route", note)]
    for key, label in (("queries_s", "docs/queries.md examples (all)"), ("audit_sample_s", "audit sample (200)"),
                       ("dashboard_s", "dashboard render"), ("check_s", "flywheel check")):  # fmt: skip
        figs.append(Figure(f"{label}: time vs linear growth", b[key], a[key] * grow, "s", 0.8, lower_is_better=True,
                           note=f"{a[key]:.2f} s at {a['episodes']:,}; linear would be {a[key] * grow:.2f} s"))  # fmt: skip
    figs.append(Figure("lake bytes per episode vs at the first point", b["lake_bytes"] / b["episodes"], a["lake_bytes"] / a["episodes"],
                       "B/episode", 0.8, lower_is_better=True, note=f"{b['lake_bytes'] / 2**30:.2f} GiB at {b['episodes']:,}"))  # fmt: skip
    return figs


def _rate_figure(a: dict[str, Any], b: dict[str, Any], key: str, what: str, note: str) -> Figure:
    """A rate at the last point against the first, each times the reference time of its rounds (the host's speed
    then): rounds minutes apart are compared as if the host had kept one speed. The raw ratio is in the note."""
    raw = f"raw {b[key]:,.0f} vs {a[key]:,.0f} episodes/s = {b[key] / a[key]:.2f}x"
    label = f"{what} rate at {b['episodes']:,} vs at {a['episodes']:,}"
    if not (a.get("ref_s") and b.get("ref_s")):
        return Figure(label, b[key], a[key], "episodes/s", 0.8, note=f"{note}; no reference timing: {raw}")
    return Figure(
        label + " (host speed corrected)",
        b[key] * b["ref_s"],
        a[key] * a["ref_s"],
        "episodes/ref",
        0.8,
        note=f"{note}; {raw}; reference write+read {a['ref_s']:.3f} s -> {b['ref_s']:.3f} s",
    )


def print_points(state: dict[str, Any]) -> None:
    from rich.table import Table

    pts = sorted(state["points"].values(), key=lambda m: m["episodes"])
    t = Table(
        "episodes",
        "ingest/s",
        "route/s",
        "reference s",
        "queries s",
        "audit s",
        "dashboard s",
        "check s",
        "lake GiB",
        title="bench_scale points",
    )
    for m in pts:
        t.add_row(f"{m['episodes']:,}", f"{m['ingest_rate']:,.0f}", f"{m['route_rate']:,.0f}", f"{m.get('ref_s') or float('nan'):.3f}", f"{m['queries_s']:.2f}",
                  f"{m['audit_sample_s']:.2f}", f"{m['dashboard_s']:.2f}", f"{m['check_s']:.2f}", f"{m['lake_bytes'] / 2**30:.2f}")  # fmt: skip
    console.print(t)
    if pts:
        q = Table("query", *[f"{m['episodes']:,}" for m in pts], title="docs/queries.md examples (s)")
        for k in pts[0]["queries"]:
            q.add_row(f"{k} {pts[0]['queries'][k]['sql'][:50]}", *[f"{m['queries'][k]['s']:.2f}" for m in pts])
        console.print(q)


def run() -> list[Figure]:
    cfg = config()
    console.print(f"bench_scale: {cfg['total']:,} episodes over {cfg['rounds']} rounds, {cfg['steps']} steps each, points "
                  f"{', '.join(f'{p:,}' for p in cfg['points'])}; lake in {cfg['dir']}")  # fmt: skip
    state = build(cfg)
    print_points(state)
    figs = figures(state)
    if os.environ.get("BENCH_SCALE_KEEP") != "1":
        shutil.rmtree(cfg["dir"], ignore_errors=True)
    return figs


if __name__ == "__main__":
    from bench.common import print_figures

    print_figures("bench_scale", run())
