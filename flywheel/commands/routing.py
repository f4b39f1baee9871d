"""Routing commands: `flywheel route` (validate a round's new episodes into the piles) and `flywheel simulate`."""

from __future__ import annotations

import csv
import json
import sys
from enum import Enum
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.console import console, esc
from flywheel.commands.common import LakeOpt, open_lake


class SimFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def route(
    round: Annotated[int, typer.Option("--round", "-r", help="The flywheel round whose new episodes are routed.")],
    lake: LakeOpt = None,
    allow_failed_dq: Annotated[
        bool, typer.Option("--allow-failed-dq", help="Route even if the batch fails its data-quality suite (recorded).")
    ] = False,
    policy: Annotated[
        str | None, typer.Option("--policy", help="Routing policy file (default: settings, bundled).")
    ] = None,
) -> None:
    """Validate the round's new episodes (in neither pile) and route passes to sft, failures to ct, with reasons.

    Idempotent: a re-run routes nothing twice and repairs an interrupted run. Updates the `rounds` row.

    Example: flywheel route --round 3 --lake ./lake
    """
    from validators.registry import load_policy
    from validators.routing import route_round

    lk = open_lake(lake)
    pol = load_policy(policy)
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task(f"round {round}: reading new episodes")
        done = {"n": 0}

        def progress(stage: str, info: dict[str, Any]) -> None:
            if stage == "loaded":
                done["total"] = info["n"]
            if stage == "ct_appended":
                done["n"] += 1
            bar.update(task, description=f"round {round}: {stage.replace('_', ' ')} ({done.get('total', 0):,} new)")

        s = route_round(lk, round, policy=pol, allow_failed_dq=allow_failed_dq, progress=progress)
    t = Table(
        "round", "new", "routed now", "pass", "fail", "pass rate [95% CI]", "sft", "ct", title=f"routing: {esc(lk.uri)}"
    )
    ci = "" if s.pass_rate is None else f"{_pct(s.pass_rate)} [{_pct(s.pass_rate_lo)}, {_pct(s.pass_rate_hi)}]"
    t.add_row(
        str(s.round),
        f"{s.n_new:,}",
        f"{s.routed_now:,}",
        f"{s.n_pass:,}",
        f"{s.n_fail:,}",
        ci,
        f"{s.sft_size:,}",
        f"{s.ct_size:,}",
    )
    console.print(t)
    if s.by_source:
        st = Table("source", "n", "pass rate [95% CI]", title="by source")
        for k, v in s.by_source.items():
            st.add_row(esc(k), f"{v['n']:,}", f"{_pct(v['pass_rate'])} [{_pct(v['lo'])}, {_pct(v['hi'])}]")
        console.print(st)
    if s.reasons:
        console.print("failure reasons: " + esc(", ".join(f"{k}={v:,}" for k, v in s.reasons.items())))
    if s.dq:
        state = "passed" if s.dq["success"] else ("FAILED, overridden" if s.dq["overridden"] else "FAILED")
        console.print(f"data quality: {state} ({s.dq['n_failed']}/{s.dq['n_expectations']} failed)")


def simulate(
    rounds: Annotated[int, typer.Option("--rounds", help="Number of rounds.")] = 4,
    attempts: Annotated[int, typer.Option("--attempts", help="Rollouts per round.")] = 10_000,
    pass_shares: Annotated[
        str | None,
        typer.Option(
            "--pass-shares",
            help="True pass share per round, comma-separated (default: 0.30,0.45,0.60,0.70 stretched over --rounds).",
        ),
    ] = None,
    leniency: Annotated[float, typer.Option("--leniency", help="Share of true failures the verifier passes.")] = 0.0,
    steps: Annotated[int, typer.Option("--steps", help="Steps per synthetic rollout.")] = 5,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    lake: Annotated[str | None, typer.Option("--lake", help="Route into this lake (default: a temporary one).")] = None,
    format: Annotated[SimFormat, typer.Option("--format", "-f", help="Output format.")] = SimFormat.table,
) -> None:
    """Route synthetic rollouts with known truth through the real routing code and show the piles per round,
    with the share of true failures that reached SFT (what a lenient validator costs).

    Example: flywheel simulate --rounds 4 --attempts 10000 --pass-shares 0.30,0.45,0.60,0.70 --leniency 0.25
    """
    from validators.simulate import as_rows
    from validators.simulate import simulate as run

    try:
        shares = [float(x) for x in pass_shares.split(",") if x.strip()] if pass_shares else None
    except ValueError:
        raise ValueError(f"--pass-shares must be numbers separated by commas, got {pass_shares!r}") from None
    lk = open_lake(lake, create=True) if lake else None
    with console.status(f"simulating {rounds} round(s) x {attempts:,} rollouts"):
        rows = as_rows(run(rounds, attempts, shares, leniency, lake=lk, steps=steps, seed=seed))
    if format is SimFormat.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        return
    if format is SimFormat.json:
        print(json.dumps(rows, indent=2))
        return
    t = Table("round", "true pass", "pass", "fail", "pass rate [95% CI]", "sft", "ct", "failures -> sft", "bad share of sft",
              title=f"simulate: leniency {leniency:g}")  # fmt: skip
    for r in rows:
        t.add_row(
            str(r["round"]), _pct(r["true_pass_share"]), f"{r['n_pass']:,}", f"{r['n_fail']:,}",
            f"{_pct(r['pass_rate'])} [{_pct(r['pass_rate_lo'])}, {_pct(r['pass_rate_hi'])}]",
            f"{r['sft_size']:,}", f"{r['ct_size']:,}",
            f"{r['failures_in_sft']:,} ({_pct(r['failures_to_sft_share'])})", _pct(r["sft_bad_share"]),
        )  # fmt: skip
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command("route")(route)
    app.command("simulate")(simulate)
