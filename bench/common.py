"""Timing, memory and reporting helpers shared by the benchmark modules."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from core.console import console

__all__ = ["SHARED_ENV", "Figure", "best_of", "console", "figure_line", "load", "print_figures", "quick", "shared_folder",
           "timer"]  # fmt: skip

#: A folder `python -m bench` makes for the run and removes after it: what several modules build once (the cold
#: start), now that each module runs in a process of its own.
SHARED_ENV = "BENCH_SHARED_DIR"


def load() -> float:
    """The machine's 1-minute load average: printed beside every figure (the 2 cores are shared, and a busy core
    halves a rate)."""
    return os.getloadavg()[0]


@dataclass(frozen=True)
class Figure:
    """One benchmark figure: our rate against a baseline's, with the target ratio it must reach."""

    name: str
    value: float  # our measurement (a rate or a time)
    baseline: float  # the baseline's, measured in the same run
    unit: str
    target: float | None = None  # required ratio (value/baseline for rates; baseline/value when lower_is_better)
    lower_is_better: bool = False
    note: str = ""
    load: float = field(default_factory=load)  # when the figure was made

    @property
    def ratio(self) -> float:
        if self.lower_is_better:
            return self.baseline / self.value if self.value else float("inf")
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def ok(self) -> bool | None:
        return None if self.target is None else self.ratio >= self.target

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "ok": self.ok}


def shared_folder(name: str) -> str | None:
    """`name` inside the run's shared folder (created), or None outside a `python -m bench` run."""
    root = os.environ.get(SHARED_ENV)
    if not root:
        return None
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    return path


def quick() -> bool:
    """BENCH_QUICK=1 shrinks every benchmark (for a smoke run), never the default."""
    return os.environ.get("BENCH_QUICK") == "1"


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["s"] = time.perf_counter() - t0


def best_of(fn: Callable[[], Any], n: int = 3) -> float:
    """Best wall time of n runs of fn (seconds)."""
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def figure_line(module: str, f: Figure) -> str:
    """One plain line per figure (no table: it must read the same in a terminal and in a log file)."""
    verdict = {None: "info", True: "ok", False: "BELOW TARGET"}[f.ok]
    target = "" if f.target is None else f" (target >= {f.target}x)"
    return (
        f"{module}: {f.name}: {f.value:,.4g} {f.unit} vs {f.baseline:,.4g} {f.unit} = {f.ratio:.2f}x{target} "
        f"{verdict}; load {f.load:.1f}" + (f"; {f.note}" if f.note else "")
    )


def print_figures(title: str, figures: list[Figure]) -> None:
    for f in figures:
        console.print(figure_line(title, f), markup=False, highlight=False, soft_wrap=True)
