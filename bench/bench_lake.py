"""Lake benchmarks: bulk append vs plain Parquet, and counting passes per round with DuckDB vs PyArrow.

Figures (each a ratio against a baseline measured in the same run, on the same Arrow data):
1. Lake.append of N episode rows (20 nested steps each, realistic strings) to a local Delta table, against
   pyarrow.parquet.write_table of the same Arrow tables. Target >= 0.5x the baseline's rows/s. Lake.append does
   more work than the baseline (schema conform, key dedup inside the batch and against the table, a Delta
   commit, file statistics), so this measures what idempotence and atomicity cost.
2. `SELECT round, count(*) FILTER (env_passed) ... GROUP BY round` over those N rows through Lake.duckdb(),
   against a PyArrow dataset scan + group_by of the same columns. Target: under a second (reported as a
   ratio to the baseline; the absolute time is in the note).

N = 1,000,000 (BENCH_QUICK=1: 100,000), written in chunks of 100,000 rows so memory stays near 1 GiB.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from bench.common import Figure, console, quick
from schemas.tables import EPISODES, STEP

STEPS = 20
CHUNK = 100_000

_VERBS = ["Open", "Click", "Type into", "Scroll down in", "Select", "Close", "Check", "Drag", "Find", "Submit"]
_THINGS = [
    "the search box",
    "the Settings menu",
    "the blue 'Save' button",
    "the dialog — it asks for a password",
    "the file list",
    "the address bar",
    "the 'Next' link at the bottom",
    "the dropdown labelled Country",
    "the checkbox next to «Remember me»",
    "the tab named Reports",
    "the calendar widget",
    "the sidebar",
]
_WHY = [
    "because the task wants the newest file.",
    "so I can see the rest of the form.",
    "since it did not respond.",
    "to confirm the order total (€42.50).",
    "then wait for the page to load.",
    "— the previous click missed it.",
]


def _pool(rng: np.random.Generator, n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """n realistic (thought, action, action_type) triples; rows draw from the pool (a pool keeps it fast)."""
    thoughts, actions, kinds = [], [], []
    for i in range(n):
        v, t, w = _VERBS[i % len(_VERBS)], _THINGS[rng.integers(len(_THINGS))], _WHY[rng.integers(len(_WHY))]
        thoughts.append(f"{v} {t} {w}")
        x, y = int(rng.integers(0, 1920)), int(rng.integers(0, 1080))
        k = i % 5
        if k == 0:
            actions.append(f"type(content='{t[:24]}')")
            kinds.append("type")
        elif k == 1:
            actions.append(f"scroll(point='<point>{x} {y}</point>', direction='down')")
            kinds.append("scroll")
        else:
            actions.append(f"click(point='<point>{x} {y}</point>')")
            kinds.append("click")
    return pa.array(thoughts), pa.array(actions), pa.array(kinds)


def synthetic_episodes(n: int, *, steps: int = STEPS, seed: int = 0, start: int = 0) -> pa.Table:
    """n episode rows with `steps` nested steps each, in the lake's episodes schema. Ids are unique per
    (seed, start + i), so chunks with different `start` never share a key."""
    rng = np.random.default_rng(seed * 1_000_003 + start)
    total = n * steps
    thought_pool, action_pool, kind_pool = _pool(rng, 4096)
    pick = pa.array(rng.integers(0, 4096, total))
    shas = pa.array([hashlib.sha256(f"{seed}-{start}-{i}".encode()).hexdigest() for i in range(min(total, 50_000))])
    sha = shas.take(pa.array(rng.integers(0, len(shas), total)))
    t0 = np.tile(np.arange(steps, dtype=np.float64) * 2.5, n) + rng.random(total)
    thought = thought_pool.take(pick)
    null_i32, null_str = pa.nulls(total, pa.int32()), pa.nulls(total, pa.string())
    cols = {
        "index": pa.array(np.tile(np.arange(steps, dtype=np.int32), n)),
        "t_start": pa.array(t0),
        "t_end": pa.array(t0 + 1.0),
        "thought": thought,
        "raw_thought": thought,
        "thought_flag": null_str,
        "action": action_pool.take(pick),
        "action_type": kind_pool.take(pick),
        "x": pa.array(rng.integers(0, 1920, total, dtype=np.int32)),
        "y": pa.array(rng.integers(0, 1080, total, dtype=np.int32)),
        "x2": null_i32,
        "y2": null_i32,
        "text": null_str,
        "key": null_str,
        "direction": null_str,
        "observation": null_str,
        "screenshot_uri": pc.binary_join_element_wise(
            "s3://lake/objects/", pc.utf8_slice_codeunits(sha, 0, 2), "/", sha, ".png", ""
        ),
        "screenshot_sha256": sha,
    }
    step_arrays = [cols.get(f.name, pa.nulls(total, f.type)) for f in STEP]
    steps_struct = pa.StructArray.from_arrays(step_arrays, fields=list(STEP))
    offsets = pa.array(np.arange(0, total + 1, steps, dtype=np.int32))
    step_lists = pa.ListArray.from_arrays(offsets, steps_struct, type=EPISODES.field("steps").type)
    ids = pa.array([hashlib.sha256(f"ep-{seed}-{start + i}".encode()).hexdigest()[:32] for i in range(n)])
    rounds = rng.integers(0, 10, n, dtype=np.int32)
    now = datetime(2025, 1, 1, tzinfo=UTC)
    ep = {
        "episode_id": ids,
        "session_id": pc.binary_join_element_wise(
            "session-", pa.array((np.arange(n) + start) // 50).cast(pa.string()), ""
        ),
        "source": pa.array(np.array(["rollout", "think_aloud", "interactive"])[rng.integers(0, 3, n)]),
        "round": pa.array(rounds),
        "task_id": pc.binary_join_element_wise(
            "miniwob/click-button-", pa.array(rng.integers(0, 500, n)).cast(pa.string()), ""
        ),
        "instruction": thought_pool.take(pa.array(rng.integers(0, 4096, n))),
        "screen_width": pa.array(np.full(n, 1920, np.int32)),
        "screen_height": pa.array(np.full(n, 1080, np.int32)),
        "env_passed": pa.array(rng.random(n) < (0.3 + 0.05 * rounds)),
        "n_steps": pa.array(np.full(n, steps, np.int32)),
        "steps": step_lists,
        "pipeline_version": pa.array(["0.1.0"] * n),
        "ingested_at": pa.array([now] * n, type=EPISODES.field("ingested_at").type),
    }
    arrays = [ep[f.name] if f.name in ep else pa.nulls(n, f.type) for f in EPISODES]
    return pa.Table.from_arrays(
        [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, EPISODES)], schema=EPISODES
    )


def run() -> list[Figure]:
    from storage import Lake

    n = 100_000 if quick() else 1_000_000
    chunk = min(CHUNK, n)
    work = Path(tempfile.mkdtemp(prefix="bench-lake-", dir=os.environ.get("BENCH_TMP")))
    try:
        lake = Lake.open(work / "lake", create=True)
        pq_dir = work / "parquet"
        pq_dir.mkdir()
        t_lake = t_pq = 0.0
        bytes_lake = bytes_pq = 0
        for i, start in enumerate(range(0, n, chunk)):
            batch = synthetic_episodes(min(chunk, n - start), start=start)
            t = time.perf_counter()
            pq.write_table(batch, pq_dir / f"part-{i:04d}.parquet", compression="snappy")
            t_pq += time.perf_counter() - t
            t = time.perf_counter()
            added = lake.append("episodes", batch)
            t_lake += time.perf_counter() - t
            assert added == batch.num_rows, (added, batch.num_rows)
            console.print(f"  chunk {i}: {batch.num_rows:,} rows  lake {t_lake:.1f}s  parquet {t_pq:.1f}s (cumulative)")
            del batch
        bytes_pq = sum(p.stat().st_size for p in pq_dir.glob("*.parquet"))
        bytes_lake = sum(p.stat().st_size for p in (work / "lake" / "tables" / "episodes").rglob("*.parquet"))
        assert lake.count("episodes") == n

        query = "SELECT round, count(*) FILTER (env_passed) AS passes, count(*) AS n FROM episodes GROUP BY round ORDER BY round"
        con = lake.duckdb(tables=["episodes"])
        con.sql(query).fetchall()  # warm the dataset's file listing and the page cache, as a baseline gets too
        duck = _best(lambda: con.sql(query).fetchall())
        got = con.sql(query).fetchall()

        def arrow_baseline() -> pa.Table:
            t = ds.dataset(pq_dir, format="parquet").to_table(columns=["round", "env_passed"])
            return t.group_by("round").aggregate([("env_passed", "sum"), ("env_passed", "count")]).sort_by("round")

        arrow_baseline()
        base = _best(arrow_baseline)
        want = arrow_baseline()
        assert [(r, p) for r, p, _ in got] == list(zip(want["round"].to_pylist(), want["env_passed_sum"].to_pylist()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    label = f"{n:,} episodes x {STEPS} steps"
    return [
        Figure(
            f"Lake.append, {label} (rows/s)",
            n / t_lake,
            n / t_pq,
            "rows/s",
            target=0.5,
            note=f"lake {t_lake:.1f} s, {bytes_lake / 2**20:,.0f} MiB; pyarrow.parquet.write_table {t_pq:.1f} s, {bytes_pq / 2**20:,.0f} MiB",
        ),
        Figure(
            "DuckDB passes per round (s) vs the 1 s budget",
            duck,
            1.0,
            "s",
            target=1.0,
            lower_is_better=True,
            note=f"DuckDB over Lake.duckdb() {duck * 1000:.0f} ms; PyArrow scan + group_by of the same files {base * 1000:.0f} ms",
        ),
    ]


def _best(fn, n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
