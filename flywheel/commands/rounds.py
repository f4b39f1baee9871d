"""`flywheel round run | status | resume` and `flywheel serve` (the deployments of prefect.yaml)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from core.console import console, esc
from flywheel.commands.common import LakeOpt, open_lake

round_app = typer.Typer(help="Run, resume and inspect flywheel rounds (one at a time per lake).", no_args_is_help=True)

LandingOpt = Annotated[str | None, typer.Option("--landing", help="Landing area with new uploads (default: settings).")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="Round configuration (JSON or TOML) overriding the defaults.")
]
DashOpt = Annotated[
    Path | None, typer.Option("--dashboard", help="Write the dashboard page here at the end of the round.")
]
EnvOpt = Annotated[
    str | None,
    typer.Option(
        "--env",
        help="Environment backend: sandbox, miniwob or an installed plug-in (entry points flywheel.envs; default: the lake's last round's).",
    ),
]
TasksOpt = Annotated[
    list[str] | None, typer.Option("--tasks", help="MiniWoB++ tasks, comma-separated or repeated (with --env miniwob).")
]
PeopleOpt = Annotated[
    str | None,
    typer.Option(
        "--people", help="Who annotates: humans (publish the tasks) or scripted (the backend's annotator, as the demo)."
    ),
]
EndByOpt = Annotated[
    str | None,
    typer.Option(
        "--end-by",
        help="End the round by then: '+90m', '+2h', '+600s' from now, 'HH:MM' (the next such local time) or an ISO date-time. The SFT stops early enough to leave the stages after it what they took in the round before; with --rounds, the last round.",
    ),
]
TrainDepOpt = Annotated[
    str | None,
    typer.Option("--train-deployment", help="Run training stages as this deployment (e.g. 'train-stage/gpu')."),
]


def end_time(text: str, now: datetime | None = None) -> float:
    """`--end-by`'s text as a time.time(). Why a parser here: a person scheduling a round thinks in "in two hours" or
    "by 06:00", the flow in seconds since the epoch. A clock time already past today means tomorrow's; an ISO
    date-time without a zone is local; one that is past is refused."""
    now = now or datetime.now().astimezone()
    t = text.strip()
    if m := re.fullmatch(r"\+(\d+(?:\.\d+)?)\s*([smh])", t):
        return now.timestamp() + float(m[1]) * {"s": 1, "m": 60, "h": 3600}[m[2]]
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", t):
        hms = [int(x) for x in t.split(":")] + [0]
        if hms[0] > 23 or hms[1] > 59 or hms[2] > 59:
            raise ValueError(f"--end-by {text!r}: not a clock time")
        at = now.replace(hour=hms[0], minute=hms[1], second=hms[2], microsecond=0)
        return (at if at > now else at + timedelta(days=1)).timestamp()
    try:
        at = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"--end-by {text!r}: give '+90m', '+2h', '+600s', 'HH:MM' or an ISO date-time") from None
    at = at if at.tzinfo else at.astimezone()  # local, as a person wrote it
    if at <= now:
        raise ValueError(f"--end-by {text!r} is already past ({now.isoformat(timespec='seconds')} now)")
    return at.timestamp()


def _run(lake: str | None, round: int | None, resume: bool, landing: str | None, config: Path | None,
         dashboard: Path | None, train_deployment: str | None, env: str | None = None,
         tasks: list[str] | None = None, people: str | None = None, cold_start: bool = False,
         end_by: float | None = None) -> None:  # fmt: skip
    if end_by is not None and train_deployment:
        raise ValueError("--end-by with --train-deployment: the deployment's SFT runs elsewhere and cannot be stopped "
                         "by this round's clock; leave one of them out")  # fmt: skip
    from core.console import quiet_prefect_console

    quiet_prefect_console()  # before Prefect is imported: it reads its logging settings then
    from flows.config import resolve_config, resolve_landing
    from flows.round import flywheel_round

    lk = open_lake(lake, create=True)
    names = [n.strip() for v in tasks or [] for n in v.split(",") if n.strip()] or None
    cfg, where = resolve_config(lk, config, env, names, people)
    landing = resolve_landing(lk, landing)
    console.print(f"configuration: {esc(where)} (env {cfg.env}, people {cfg.people}); landing {esc(landing)}")
    if cold_start:
        from flows.stages import next_round
        from training.demo import write_cold_start

        if "://" in landing:
            raise ValueError("--cold-start writes into a local landing folder; give --landing a folder")
        if next_round(lk) == 0:
            with console.status("cold start: the scripted demonstrators write round 0's uploads"):
                wrote = write_cold_start(lk, Path(landing), cfg.backend, seed=cfg.seed)
            console.print(f"cold start in {esc(landing)}: {wrote or 'already there'}")
    if end_by is not None:
        left = (end_by - time.time()) / 60
        console.print(f"the round is to end by {datetime.fromtimestamp(end_by).astimezone():%Y-%m-%d %H:%M:%S %Z} "
                      f"(in {left:.1f} min): its SFT stops early enough for the stages after it")  # fmt: skip
    try:
        out = flywheel_round(
            lake=str(lk.uri),
            round=round,
            resume=resume,
            landing=landing,
            cfg=cfg,
            dashboard=str(dashboard) if dashboard else None,
            train_deployment=train_deployment,
            end_by=end_by,
            progress=_say_budget,
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


def _say_budget(kind: str, info: dict) -> None:
    """The round's own decisions about its time (`--end-by`), printed; stage ticks stay in the Prefect log."""
    if kind == "budget":
        console.print(f"budget: {esc(info['why'])}")


def _after_api_loss(lk, cfg) -> str:  # noqa: ANN001
    """What to do after a round lost the Prefect API: the lake, not Prefect, says which stages are done."""
    from flows.stages import pending_stages, round_state

    try:
        rounds = sorted(set(lk.read("rounds", columns=["round"]).column("round").to_pylist()))
    except Exception:  # noqa: BLE001 - the lake may be down too; the Prefect error is the one to report
        return "`flywheel round status` shows which stages are done"
    for r in rounds:
        if round_state(lk, r) == "incomplete":
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
    env: EnvOpt = None,
    tasks: TasksOpt = None,
    people: PeopleOpt = None,
    rounds: Annotated[int, typer.Option("--rounds", "-n", min=1, help="Run this many rounds, one after another.")] = 1,
    end_by: EndByOpt = None,
    cold_start: Annotated[
        bool,
        typer.Option(
            "--cold-start",
            help="Before round 0, write the backend's scripted demonstrators' data into the landing area (what the demo starts from).",
        ),
    ] = False,
) -> None:
    """Run a round: sample -> annotate -> intake -> route -> CT (when due) -> SFT -> RL (when due) -> evaluate ->
    summary. Without --config/--env/--people it runs with the configuration the lake's last round recorded (a demo
    lake continues as the demo ran), else the defaults.

    Example: flywheel round run --lake ./lake --landing ./landing --dashboard dashboard.html
    Example: flywheel round run --lake ./lake-demo   (continues the demo's lake with its own configuration)
    Example: flywheel round run --env miniwob --people scripted --cold-start --rounds 2 --lake ./lake-mw
    Example: flywheel round run --lake ./lake --end-by 06:00   (or --end-by +90m)
    """
    if rounds > 1 and round is not None:
        raise ValueError("--rounds runs the next rounds in turn; leave out --round")
    end = end_time(end_by) if end_by else None
    from training.envs import close_backends

    try:
        for i in range(rounds):
            last = end if i == rounds - 1 else None
            _run(lake, round, False, landing, config, dashboard, train_deployment, env, tasks, people, cold_start, last)
    finally:
        close_backends()  # the browsers of --env miniwob


def resume(
    round: Annotated[int, typer.Argument(help="The round to finish.")],
    lake: LakeOpt = None,
    landing: LandingOpt = None,
    config: ConfigOpt = None,
    dashboard: DashOpt = None,
    train_deployment: TrainDepOpt = None,
    env: EnvOpt = None,
    tasks: TasksOpt = None,
    people: PeopleOpt = None,
    end_by: EndByOpt = None,
) -> None:
    """Finish a round from its first stage not done (finished stages are not redone).

    Example: flywheel round resume 3 --lake ./lake
    """
    end = end_time(end_by) if end_by else None
    _run(lake, round, True, landing, config, dashboard, train_deployment, env, tasks, people, end_by=end)


def _rl_cell(r) -> str:  # noqa: ANN001 - validators.rounds.RoundRecord
    """How the round's RL ran and, when measured, its own points on held-out (flows/stages.py `rl_effect`)."""
    if not r.rl:
        return ""
    e = r.rl_effect
    return r.rl.describe() + (f" ({100 * e['delta']:+.1f} points, p={e['p']:.2g})" if e else "")


def _status_table(lk, only: int | None = None) -> None:  # noqa: ANN001
    from flows.stages import STAGES
    from validators.rounds import read_rounds

    t = Table("round", "new", "P(V=1)", "held-out", "SFT", "CT", "RL", "stages", title=esc(lk.uri))
    colour = {"done": "green", "running": "yellow", "failed": "red"}

    def pct(x: float | None) -> str:
        return "" if x is None else f"{100 * x:.1f}%"

    for r in read_rounds(lk):
        if only is not None and r.round != only:
            continue
        stages = " ".join(f"[{colour.get(r.status(s), 'white')}]{s}[/]" for s in STAGES if s in r.stages)
        t.add_row(str(r.round), str(r.n_new or ""), pct(r.pass_rate), pct(r.eval_pass_rate),
                  str(r.sft_size or ""), str(r.ct_size or ""), esc(_rl_cell(r)), stages)  # fmt: skip
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
    console.print(esc(live.describe()) if live else "no round is running")


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
