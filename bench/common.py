"""Timing, memory and reporting helpers shared by the benchmark modules."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()


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

    @property
    def ratio(self) -> float:
        if self.lower_is_better:
            return self.baseline / self.value if self.value else float("inf")
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def ok(self) -> bool | None:
        return None if self.target is None else self.ratio >= self.target


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


def print_figures(title: str, figures: list[Figure]) -> None:
    t = Table("figure", "ours", "baseline", "ratio", "target", "ok", title=title)
    for f in figures:
        ok = {None: "", True: "[green]yes[/]", False: "[red]NO[/]"}[f.ok]
        t.add_row(
            f.name + (f"\n[dim]{f.note}[/]" if f.note else ""),
            f"{f.value:,.3g} {f.unit}",
            f"{f.baseline:,.3g} {f.unit}",
            f"{f.ratio:.2f}x",
            "" if f.target is None else f">= {f.target}x",
            ok,
        )
    console.print(t)
