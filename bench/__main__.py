"""Run every benchmark module (bench/bench_*.py, each with `run() -> list[Figure]`) and print the figures.

`python -m bench [NAME...]` runs only the named modules (e.g. `python -m bench lake`).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback

import bench
from bench.common import console, print_figures


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    if argv:
        names = [n for n in names if n.removeprefix("bench_") in argv or n in argv]
    failed = 0
    for name in names:
        console.rule(name)
        try:
            figures = importlib.import_module(f"bench.{name}").run()
        except Exception:  # noqa: BLE001 - one broken benchmark must not hide the others
            traceback.print_exc()
            failed += 1
            continue
        print_figures(name, figures)
        failed += sum(1 for f in figures if f.ok is False)
    console.print(f"{'all targets met' if not failed else f'{failed} figure(s) below target'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
