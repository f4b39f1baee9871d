"""Run every benchmark module (bench/bench_*.py, each with `run() -> list[Figure]`), print the figures, one line
each, write the summary lines to bench/summary.txt (BENCH_SUMMARY overrides the path: the lines read the same in a
file as in a terminal) and the figures to bench/results.json (BENCH_RESULTS overrides) so two runs can be compared.

`python -m bench [NAME...]` runs only the named modules (e.g. `python -m bench lake`);
`python -m bench compare OLD.json NEW.json` prints each figure of both runs side by side.

Each module runs in a fresh Python process (`python -m bench --one NAME OUT.json`): no module measures in the heap,
threads, allocator tuning and imports the ones before it left (in one process the RSS had reached 4.6 GB by
bench_practice, and the routing figure depended on whether an earlier module had imported `training`), and a module
that crashes its process (a segfault, the OOM killer) is reported as an error like one that raises while the others
go on. What several modules build once (the practice cold start) goes in a folder shared by the run (SHARED_ENV).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bench
from bench.common import SHARED_ENV, Figure, console, figure_line, load, print_figures, quick
from core.process import leave

RESULTS = Path(__file__).with_name("results.json")
SUMMARY = Path(__file__).with_name("summary.txt")


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=Path(__file__).parent
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _say(line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def one(name: str, out: str) -> int:
    """The child's side: run one module and write its figures (or its error) as JSON to `out`."""
    try:
        figures = importlib.import_module(f"bench.{name}").run()
    except Exception as e:  # noqa: BLE001 - reported by the parent as this module's error
        traceback.print_exc()
        Path(out).write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    Path(out).write_text(json.dumps({"figures": [asdict(f) for f in figures]}))
    return 0


def isolated(name: str) -> list[Figure]:
    """Run bench module `name` in a fresh process (its output goes straight to ours); its figures, or RuntimeError
    with the module's error or the process's exit status."""
    with tempfile.TemporaryDirectory(prefix="bench-one-") as d:
        out = Path(d) / "figures.json"
        rc = subprocess.run([sys.executable, "-m", "bench", "--one", name, str(out)]).returncode
        got = json.loads(out.read_text()) if out.exists() else {}
    if "figures" in got:
        return [Figure(**f) for f in got["figures"]]
    raise RuntimeError(got.get("error") or f"the module's process ended with exit status {rc} and no figures")


def main(argv: list[str]) -> int:
    if argv[:1] == ["compare"]:
        return compare(*argv[1:3])
    if argv[:1] == ["--one"] and len(argv) == 3:
        return one(argv[1], argv[2])
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    if argv:
        names = [n for n in names if n.removeprefix("bench_") in argv or n in argv]
    t_start, load_start = time.perf_counter(), load()
    results: dict[str, Any] = {
        "commit": _commit(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick(),
        "cores": os.cpu_count(),
        "load_start": load_start,
        "modules": {},
        "figures": [],
    }
    lines: list[str] = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as shared:  # what modules build once (cold start)
        os.environ.setdefault(SHARED_ENV, shared)
        for name in names:
            console.rule(name)
            t0 = time.perf_counter()
            try:
                figures = isolated(name)
            except Exception as e:  # noqa: BLE001 - one broken benchmark must not hide the others
                failed += 1
                results["modules"][name] = {"s": time.perf_counter() - t0, "error": f"{type(e).__name__}: {e}"}
                lines.append(f"{name}: ERROR {type(e).__name__}: {e}")
                continue
            results["modules"][name] = {"s": time.perf_counter() - t0}
            print_figures(name, figures)
            lines += [figure_line(name, f) for f in figures]
            results["figures"] += [{"module": name, **f.as_dict()} for f in figures]
            failed += sum(1 for f in figures if f.ok is False)
    wall = time.perf_counter() - t_start
    results.update(wall_s=wall, load_end=load(), failed=failed)
    out = Path(os.environ.get("BENCH_RESULTS", RESULTS))
    out.write_text(json.dumps(results, indent=1) + "\n")
    verdict = "all targets met" if not failed else f"{failed} figure(s) below target or failed"
    lines.append(f"{verdict}; {len(names)} module(s) in {wall / 60:.1f} min, load {load_start:.1f} -> {load():.1f}; "
                 f"{results['commit']}; {out}")  # fmt: skip
    summary = Path(os.environ.get("BENCH_SUMMARY", SUMMARY))
    summary.write_text("\n".join(lines) + "\n")
    console.rule("summary")
    for line in lines:
        _say(line)
    _say(f"(these lines are in {summary})")
    return 1 if failed else 0


def compare(old: str | None, new: str | None) -> int:
    """Each figure of two results files: ratio then and now (figures matched by module and name)."""
    if not old or not new:
        _say("usage: python -m bench compare OLD.json NEW.json")
        return 2
    a, b = (json.loads(Path(p).read_text()) for p in (old, new))
    before = {(f["module"], f["name"]): f for f in a["figures"]}
    _say(
        f"{old}: {a['commit']} ({a['started']}, load {a['load_start']:.1f}); {new}: {b['commit']} ({b['started']}, load {b['load_start']:.1f})"
    )
    for f in b["figures"]:
        o = before.get((f["module"], f["name"]))
        then = f"{o['ratio']:.2f}x (load {o['load']:.1f})" if o else "new"
        _say(f"{f['module']}: {f['name']}: {then} -> {f['ratio']:.2f}x (load {f['load']:.1f})")
    return 0


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
