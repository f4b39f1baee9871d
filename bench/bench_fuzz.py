"""Fuzzing for minutes: the targets of tests/hostile/fuzz_targets.py (action parser, rollout reader, annotation
reader, think-aloud bundle reader on mutated folders and zips; deep nesting, markup in every string field and file
name, non-finite numbers in every numeric field), each in fresh random hypothesis runs until its share
of the time budget is spent. Reports inputs tried, crashes (must be 0) and outcomes (quarantine codes, episodes, refused actions) per target.

BENCH_FUZZ_SECONDS sets the total budget (default 600, BENCH_QUICK=1: 40). Figures: per target, hostile inputs per
second against valid inputs per second through the same reader (the cost of hostility), and the crash count.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.common import Figure, console, quick

SHARES = {"action": 0.15, "rollouts": 0.3, "annotations": 0.2, "bundles": 0.35}


def _targets(work: Path, lake: Any) -> dict[str, tuple[Any, Callable[[Any], Any], Callable[[], Any]]]:
    """name -> (strategy, run one hostile input, run one valid input)."""
    from tests.hostile import fuzz_targets as ft

    def bundle(case: Any) -> None:
        parts, raw, where, name, zbytes = case
        ft.target_bundle(lake, parts, raw, zbytes, work, name)

    @st.composite
    def bundle_case(draw: Any) -> Any:
        parts, raw, where, name = draw(ft.hostile_bundle())
        z = None
        if where == "zip":
            d = Path(tempfile.mkdtemp(dir=work))
            z = draw(ft.mutated_bytes(ft.zip_folder(ft.write_parts(d / "src", parts)), 3))
        return parts, raw, where, name, z

    rollout = st.lists(
        st.one_of(ft.hostile_json(ft.rollout_line()), st.just(json.dumps(ft.rollout_line()))),
        min_size=1,
        max_size=8,
    )
    return {
        "action": (
            st.one_of(st.text(max_size=300), st.sampled_from(ft.VALID_ACTIONS).flatmap(lambda a: ft.mutated_bytes(a.encode(), 6)).map(lambda b: b.decode("utf-8", "replace"))),
            ft.target_action,
            lambda: [ft.target_action(a) for a in ft.VALID_ACTIONS[:1]],
        ),
        "rollouts": (
            rollout.map(lambda ls: "\n".join(ls).encode()).flatmap(lambda b: st.one_of(st.just(b), ft.mutated_bytes(b, 6))),
            ft.target_rollout_block,
            lambda: ft.target_rollout_block(json.dumps(ft.rollout_line()).encode()),
        ),
        "annotations": (
            ft.hostile_json(ft.annotation_doc(), 5).map(lambda d: d.encode()).flatmap(lambda b: st.one_of(st.just(b), ft.mutated_bytes(b, 4))),
            lambda b: ft.target_annotation(b, work),
            lambda: ft.target_annotation(json.dumps(ft.annotation_doc()).encode(), work),
        ),
        "bundles": (bundle_case(), bundle, lambda: ft.target_bundle(lake, ft.PARTS, None, None, work)),
    }  # fmt: skip


def fuzz(name: str, strategy: Any, target: Callable[[Any], Any], seconds: float) -> dict[str, Any]:
    """Fresh randomized hypothesis runs of `target` until `seconds` are spent; crashes are collected, not raised."""
    tried = {"n": 0}
    crashes: list[str] = []
    deadline = time.monotonic() + seconds

    def body(x: Any) -> None:
        if time.monotonic() > deadline:
            return  # the budget is spent: let this run finish quickly
        tried["n"] += 1
        target(x)

    while time.monotonic() < deadline:
        run = settings(max_examples=100, database=None, deadline=None, derandomize=False,
                       suppress_health_check=list(HealthCheck))(given(strategy)(body))  # fmt: skip
        try:
            run()  # a fresh random run each time (no example database, not derandomized)
        except Exception as e:  # noqa: BLE001 - a crash: hypothesis re-raises the shrunk failing input's error
            subs = getattr(e, "exceptions", None) or [e]  # several distinct failures come as an exception group
            msg = " | ".join(" ".join(str(x).split())[:300] for x in subs)
            crashes.append(msg)
            console.print(f"[red]{name}: crash[/] {msg}")
    return {"tried": tried["n"], "crashes": crashes}


def run() -> list[Figure]:
    from storage import Lake
    from tests.hostile import fuzz_targets as ft

    total = float(os.environ.get("BENCH_FUZZ_SECONDS", 40 if quick() else 600))
    figs: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-fuzz-") as tmp:
        work = Path(tmp)
        lake = Lake.open(work / "lake", create=True)
        all_crashes = 0
        tried_total = 0
        for name, (strategy, target, valid) in _targets(work, lake).items():
            t0 = time.perf_counter()
            n_valid = 0
            while time.perf_counter() - t0 < 2.0:
                valid()
                n_valid += 1
            valid_rate = n_valid / (time.perf_counter() - t0)
            ft.OUTCOMES.clear()
            t0 = time.perf_counter()
            res = fuzz(name, strategy, target, total * SHARES[name])
            secs = time.perf_counter() - t0
            all_crashes += len(res["crashes"])
            tried_total += res["tried"]
            outcomes = ", ".join(f"{code} {n:,}" for (_, code), n in ft.OUTCOMES.most_common())
            console.print(
                f"{name}: {res['tried']:,} hostile inputs in {secs:.0f} s, {len(res['crashes'])} crash(es); outcomes: {outcomes}"
            )
            figs.append(Figure(f"{name}: hostile inputs/s vs valid inputs/s", res["tried"] / secs, valid_rate, "inputs/s",
                               note=f"{res['tried']:,} inputs, {len(res['crashes'])} crashes"))  # fmt: skip
        figs.append(Figure("fuzz crashes (must be 0) vs one crash", all_crashes, 1.0, "crashes", target=1.01, lower_is_better=True,
                           note=f"{tried_total:,} hostile inputs in {total:.0f} s"))  # fmt: skip
    return figs


if __name__ == "__main__":
    from bench.common import print_figures

    print_figures("bench_fuzz", run())
