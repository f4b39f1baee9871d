"""Dashboard rendering on a big lake: 100 rounds and 1,000,000 episodes (BENCH_QUICK=1: 100,000).

Figures:
- render_dashboard (every panel: queries, Wilson intervals, SVG, HTML) against the bare DuckDB panel queries on
  the same lake (the floor: the same SQL fetched to Arrow, nothing else), best of 3 each;
- the same render time against the acceptance budget of 5 s (a fixed budget, not a measurement);
- a cold `flywheel dashboard` process (imports included): wall and CPU seconds, reported in the note (on a shared
  machine the wall time includes waiting for a core).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Figure, best_of, console, quick

BUDGET_S = 5.0


def _bare_queries(lake) -> None:
    from dashboards.render import SUMMARY_SQL
    from dashboards.spec import load_panels

    con = lake.duckdb()
    for p in load_panels():
        con.sql(p.sql).to_arrow_table()
        if p.table_sql:
            con.sql(p.table_sql).to_arrow_table()
    con.sql(SUMMARY_SQL.read_text()).to_arrow_table()
    con.close()


def run() -> list[Figure]:
    from dashboards.render import build_page, render_dashboard
    from storage.lake import Lake
    from tests.dashboards.demo_lake import build_demo_lake

    n = 100_000 if quick() else 1_000_000
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        lake = Lake.open(Path(tmp) / "lake", create=True)
        t0 = time.perf_counter()
        totals = build_demo_lake(lake, rounds=100, episodes=n, chunks=10, quarantined=5_000, seed=1)
        console.print(
            f"demo lake: {totals.episodes:,} episodes, {totals.rounds} rounds, "
            f"{lake.count('verdicts'):,} verdicts, built in {time.perf_counter() - t0:.1f} s"
        )
        out = Path(tmp) / "dashboard.html"
        render_dashboard(lake, out)  # warm: imports, OS file cache
        page = build_page(lake)
        bad = [f"{p.id}: {p.state}" for p in page.panels if p.state != "ok"]
        if bad:
            raise RuntimeError(f"panels did not render on the bench lake: {bad}")
        render_s = best_of(lambda: render_dashboard(lake, out), 3)
        bare_s = best_of(lambda: _bare_queries(lake), 3)
        env = {**os.environ, "FLYWHEEL_CONFIG": str(Path(tmp) / "none.toml")}
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [sys.executable, "-m", "flywheel", "dashboard", "--lake", str(Path(tmp) / "lake"), "--out", str(out)],
            check=True,
            capture_output=True,
            env=env,
        )
        cold_s = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cold_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        size_kb = out.stat().st_size / 1024
    label = f"{n:,} episodes, 100 rounds"
    return [
        Figure(
            f"render_dashboard vs bare panel queries ({label})",
            render_s,
            bare_s,
            "s",
            target=0.5,
            lower_is_better=True,
            note=f"page {size_kb:.0f} KiB; ratio >= 0.5 means rendering adds at most the queries' own time",
        ),
        Figure(
            f"render_dashboard vs the 5 s budget ({label})",
            render_s,
            BUDGET_S,
            "s",
            target=1.0,
            lower_is_better=True,
            note=f"baseline is the acceptance budget; a cold `flywheel dashboard` process (imports included): "
            f"{cold_s:.2f} s wall, {cold_cpu:.2f} s CPU",
        ),
    ]
