"""`flywheel round run | status | resume` and `flywheel serve` (the deployments of prefect.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from core.console import console
from flywheel.commands.common import LakeOpt, open_lake

round_app = typer.Typer(help="Run, resume and inspect flywheel rounds (one at a time per lake).", no_args_is_help=True)

LandingOpt = Annotated[str | None, typer.Option("--landing", help="Landing area with new uploads (default: settings).")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="Round configuration (JSON or TOML) overriding the defaults.")
]
DashOpt = Annotated[
    Path | None, typer.Option("--dashboard", help="Write the dashboard page here at the end of the round.")
]
TrainDepOpt = Annotated[
    str | None,
    typer.Option("--train-deployment", help="Run training stages as this deployment (e.g. 'train-stage/gpu')."),
]


def _run(lake: str | None, round: int | None, resume: bool, landing: str | None, config: Path | None,
         dashboard: Path | None, train_deployment: str | None) -> None:  # fmt: skip
    from core.console import quiet_prefect_console

    quiet_prefect_console()  # before Prefect is imported: it reads its logging settings then
    from core.settings import get_settings
    from flows.round import flywheel_round
    from flows.stages import load_round_config

    lk = open_lake(lake, create=True)
    cfg = load_round_config(config)
    try:
        out = flywheel_round(
            lake=str(lk.uri),
            round=round,
            resume=resume,
            landing=landing or get_settings().landing,
            cfg=cfg,
            dashboard=str(dashboard) if dashboard else None,
            train_deployment=train_deployment,
        )
    except Exception as e:
        from prefect.settings import PREFECT_API_URL

        from flows.round import PrefectAPIDown, prefect_api_failure

        why = prefect_api_failure(e)
        if why is None:
            raise
        raise PrefectAPIDown(
            f"the Prefect API at {PREFECT_API_URL.value()} did not answer ({why}); {_after_api_loss(lk, cfg)}"
        ) from e
    console.print(f"round {out['round']} finished: {', '.join(out['stages']) or 'nothing left to run'}")
    _status_table(lk, only=out["round"])


def _after_api_loss(lk, cfg) -> str:  # noqa: ANN001
    """What to do after a round lost the Prefect API: the lake, not Prefect, says which stages are done."""
    from flows.stages import pending_stages, round_state

    try:
        rounds = sorted(set(lk.read("rounds", columns=["round"]).column("round").to_pylist()))
    except Exception:  # noqa: BLE001 - the lake may be down too; the Prefect error is the one to report
        return "`flywheel round status` shows which stages are done"
    for r in rounds:
        if round_state(lk, r, cfg) == "incomplete":
            return (f"round {r}'s finished stages are kept (pending: {', '.join(pending_stages(lk, r, cfg))}): "
                    f"run `flywheel round resume {r}` once it answers")  # fmt: skip
    return "no round is left half-done (`flywheel round status`); run the command again once it answers"


def run(
    lake: LakeOpt = None,
    round: Annotated[int | None, typer.Option("--round", "-r", help="Round to run (default: the next one).")] = None,
    landing: LandingOpt = None,
    config: ConfigOpt = None,
    dashboard: DashOpt = None,
    train_deployment: TrainDepOpt = None,
) -> None:
    """Run a round: ingest -> route -> CT (when due) -> SFT -> RL -> sample -> evaluate -> summary.

    Example: flywheel round run --lake ./lake --landing ./landing --dashboard dashboard.html
    """
    _run(lake, round, False, landing, config, dashboard, train_deployment)


def resume(
    round: Annotated[int, typer.Argument(help="The round to finish.")],
    lake: LakeOpt = None,
    landing: LandingOpt = None,
    config: ConfigOpt = None,
    dashboard: DashOpt = None,
    train_deployment: TrainDepOpt = None,
) -> None:
    """Finish a round from its first stage not done (finished stages are not redone).

    Example: flywheel round resume 3 --lake ./lake
    """
    _run(lake, round, True, landing, config, dashboard, train_deployment)


def _status_table(lk, only: int | None = None) -> None:  # noqa: ANN001
    from flows.stages import STAGES

    rows = sorted(lk.read("rounds").to_pylist(), key=lambda r: r["round"])
    t = Table("round", "new", "P(V=1)", "held-out", "SFT", "CT", "stages", title=str(lk.uri))
    colour = {"done": "green", "running": "yellow", "failed": "red"}

    def pct(x: float | None) -> str:
        return "" if x is None else f"{100 * x:.1f}%"

    for r in rows:
        if only is not None and r["round"] != only:
            continue
        st = json.loads(r["stage_status"]) if r["stage_status"] else {}
        stages = " ".join(f"[{colour.get(st[s].get('status'), 'white')}]{s}[/]" for s in STAGES if s in st)
        t.add_row(str(r["round"]), str(r["n_new"] or ""), pct(r["pass_rate"]), pct(r["eval_pass_rate"]),
                  str(r["sft_size"] or ""), str(r["ct_size"] or ""), stages)  # fmt: skip
    console.print(t)
    console.print("stages: [green]done[/] [yellow]running[/] [red]failed[/]")


def status(lake: LakeOpt = None) -> None:
    """Show every round's numbers and stage status, and the round running now (if any).

    Example: flywheel round status --lake ./lake
    """
    from storage.lock import LakeLock

    lk = open_lake(lake)
    _status_table(lk)
    live = LakeLock(lk, "round", heartbeat=False).current()
    console.print(live.describe() if live else "no round is running")


def serve(
    file: Annotated[Path, typer.Option("--file", help="The deployments file.")] = Path("prefect.yaml"),
    only: Annotated[list[str] | None, typer.Option("--only", help="Serve only these deployment names.")] = None,
) -> None:
    """Serve the deployments of prefect.yaml (schedules included) from this process until Ctrl-C.

    Example: PREFECT_API_URL=http://127.0.0.1:4200/api flywheel serve
    """
    from flows.serve import serve_file

    serve_file(file, only)


def register(app: typer.Typer) -> None:
    for fn in (run, status, resume):
        round_app.command()(fn)
    app.add_typer(round_app, name="round")
    app.command()(serve)
