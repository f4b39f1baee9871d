"""`flywheel demo`: the whole flywheel on the built-in sandbox or MiniWoB++ in headless Chromium (`--env miniwob`),
with a progress display and a closing rounds table (and, for MiniWoB++, a per-task table)."""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from core.console import console, esc
from flywheel.commands.common import LakeOpt
from validators.rounds import RoundRecord

MARKER = ".flywheel-demo"
#: The search RL stage's seconds a round in the sandbox demo. Measured on 2 idle cores (docs/training.md, runs l and
#: m): 150 s gave RL +12.5 and +8.9 points in rounds 1-2 (p < 0.001) and round 3 level with the PPO demo (51.4 vs
#: 52.5%, p = 0.79), in 19.1 min; with PPO's 6 steps a round RL added nothing (p >= 0.06 in every round).
DEMO_SEARCH_S = 150.0


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def _cell(rate: float | None, lo: float | None, hi: float | None) -> str:
    return "" if rate is None else f"{_pct(rate)} ({_pct(lo)}-{_pct(hi)})"


def rounds_rich_table(rows: list[RoundRecord]) -> Table:
    """One row per round: new-sample pass rate P(V=1|r) and held-out pass rate with 95% intervals, per level."""
    levels = sorted({lv for r in rows for lv in r.eval_rates("level")})
    effect = any(r.rl_effect for r in rows)
    t = Table(title="flywheel rounds (pass rates in %, 95% Wilson intervals)")
    cols = [
        "round",
        "new",
        "P(V=1|r)",
        "model P(V=1)",
        "accept",
        "held-out",
        "n",
        *[f"L{lv}" for lv in levels],
        *(["before RL", "RL +", "p"] if effect else []),
        "SFT",
        "CT",
    ]
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        s, by_level = r.sampled, r.eval_rates("level")
        t.add_row(
            str(r.round), str(r.n_new or 0), _cell(r.pass_rate, r.pass_rate_lo, r.pass_rate_hi),
            _cell(s.get("pass_rate"), s.get("lo"), s.get("hi")) if r.round else "",
            _pct(r.annotation.get("accept_rate")), _cell(r.eval_pass_rate, r.eval_pass_rate_lo, r.eval_pass_rate_hi),
            str(r.eval_n or ""), *[_pct(by_level.get(lv)) for lv in levels], *(_effect_cells(r.rl_effect) if effect else []),
            str(r.sft_size or 0), str(r.ct_size or 0),
        )  # fmt: skip
    return t


def _effect_cells(e: dict[str, Any]) -> list[str]:
    """Held-out before the round's RL stage, RL's points, and the paired test's p (blank when not measured)."""
    if not e:
        return ["", "", ""]
    b = e["before"]
    return [_cell(b["rate"], b["lo"], b["hi"]), f"{100 * e['delta']:+.1f}", f"{e['p']:.2g}"]


def per_task_table(rows: list[RoundRecord]) -> Table:
    """Held-out success per task (a MiniWoB++ task is a family) and round, beside the scripted expert's."""
    tasks = sorted({t for r in rows for t in r.eval_rates("family")})
    ref = next((r.demonstrator_eval for r in rows if r.demonstrator_eval), {})
    t = Table(title="held-out success per task (%)")
    for col in ["task", "expert", *[f"round {r.round}" for r in rows]]:
        t.add_column(col, justify="left" if col == "task" else "right", no_wrap=True)
    for name in tasks:
        t.add_row(name, _pct(ref.get(name)), *[_pct(r.eval_rates("family").get(name)) for r in rows])
    return t


def _tasks_arg(values: list[str] | None) -> list[str] | None:
    names = [n.strip() for v in values or [] for n in v.split(",") if n.strip()]
    return names or None


def demo(
    rounds: Annotated[int, typer.Option("--rounds", "-n", min=1, help="Flywheel rounds after the cold start.")] = 3,
    lake: LakeOpt = None,
    fresh: Annotated[
        bool, typer.Option("--fresh/--resume", help="Start from an empty lake (default) or reuse it.")
    ] = True,
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny sizes: a smoke test of every stage (nothing learns).")
    ] = False,
    env: Annotated[
        str,
        typer.Option(
            "--env", help="Environment backend: sandbox (built in) or miniwob (MiniWoB++ in headless Chromium)."
        ),
    ] = "sandbox",
    tasks: Annotated[
        list[str] | None,
        typer.Option(
            "--tasks", help="MiniWoB++ tasks, comma-separated or repeated (default: all 12 with a demonstrator)."
        ),
    ] = None,
    budget: Annotated[
        float,
        typer.Option(
            "--budget-min",
            min=0,
            help="Wall-time budget in minutes for the sandbox demo: the SFT passes are sized to fit it from this machine's measured step rate, printed and recorded in round 0 (0: the shipped sizes, whatever the time).",
        ),
    ] = 20.0,
    precision: Annotated[
        str,
        typer.Option(
            "--precision",
            help="Training precision: auto (whichever this machine runs faster, measured once), bf16 or fp32.",
        ),
    ] = "auto",
    annotate: Annotated[
        int | None,
        typer.Option(
            "--annotate",
            min=0,
            help="Tasks annotated interactively per round on the newest model's proposals (default: the demo's size; 0: off).",
        ),
    ] = None,
    rl: Annotated[
        str | None,
        typer.Option(
            "--rl",
            help="The RL stage: search (practice by search and imitation, --rl-seconds a round; the default on the sandbox) or joint (policy-gradient RL, one PPO iteration; the default on MiniWoB++, whose browser cannot copy a state).",
        ),
    ] = None,
    rl_seconds: Annotated[
        float, typer.Option("--rl-seconds", min=1, help="Wall time of the search RL stage per round.")
    ] = DEMO_SEARCH_S,
    prepare: Annotated[
        bool,
        typer.Option(
            "--prepare",
            help="Only prepare this machine and exit: measure the training precision and build torch.compile's kernels for the demo's training step, both kept in the machine's cache (~/.cache/flywheel); `make setup` runs it.",
        ),
    ] = False,
) -> None:
    """Run the flywheel on the built-in sandbox (or MiniWoB++ with --env miniwob): a cold start from demonstrator
    data through all three ingestion paths (think-aloud bundles, interactive sessions, rollout files), then rounds
    0..N of the round engine with the scripted people (`flywheel round run --people scripted`): rejection sampling ->
    interactive annotation on the newest model's proposals -> intake -> validate and route -> CT when due -> SFT ->
    RL -> held-out evaluation. On the sandbox the SFT passes are sized to --budget-min (20) from this machine's
    measured step rate (printed and recorded). Prints the rounds table at the end (and held-out success per task for
    MiniWoB++).

    Example: flywheel demo --rounds 3 --lake ./lake-demo
    Example: flywheel demo --env miniwob --tasks click-button,click-link,enter-text --quick --rounds 1
    """
    import shutil
    from pathlib import Path

    from core.settings import get_settings
    from flows.config import round_config
    from training.demo import ColdStart, landing_for

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    cfg = round_config(
        env, _tasks_arg(tasks), quick_sizes=quick, people="scripted", annotate=annotate, precision=precision
    )
    rl = rl or ("search" if env == "sandbox" else "joint")
    if rl not in ("joint", "search"):
        raise ValueError(f"--rl is joint or search, not {rl!r}")
    if rl == "search":  # RoundConfig refuses a world that cannot copy a state
        from dataclasses import replace

        search = replace(cfg.flywheel.search, time_budget_s=rl_seconds)
        cfg = replace(cfg, rl_mode="search", flywheel=replace(cfg.flywheel, search=search))
    if prepare:  # once per machine, outside the demo's clock, like the install (docs/training.md, "Compile")
        from flows.budget import calibrate
        from training.compiled import kernel_cache

        t = time.perf_counter()
        with console.status("building this machine's training kernels"):
            step_s, prec = calibrate(cfg)
        console.print(f"prepared in {time.perf_counter() - t:.0f} s: an SFT step {step_s:.3f} s ({prec.get('precision')}, "
                      f"{prec.get('source')}; compiled: {prec.get('compiled')}); kernels in {kernel_cache()}")  # fmt: skip
        return
    cold = ColdStart.quick() if quick else ColdStart()
    lake_uri = lake or get_settings().lake
    if fresh and "://" not in lake_uri and Path(lake_uri).exists():
        if not (Path(lake_uri) / MARKER).is_file():  # never wipe a lake the demo did not create
            raise ValueError(f"{lake_uri} exists and is not a demo lake; pick another --lake or use --resume")
        for p in (lake_uri, str(landing_for(lake_uri))):
            shutil.rmtree(p, ignore_errors=True)
    if "://" not in lake_uri:
        Path(lake_uri).mkdir(parents=True, exist_ok=True)
        (Path(lake_uri) / MARKER).write_text("created by flywheel demo; --fresh may delete this folder\n")
    from flows.demo import flywheel_demo

    t0, started = time.perf_counter(), time.time()
    notes: dict[str, Any] = {}
    budget = budget if (budget and not quick and env == "sandbox") else 0.0  # the reference is the sandbox demo's
    if budget:
        from flows.budget import REF_STEP_S, calibrate, project

        with console.status("measuring this machine's training step"):
            step_s, prec = calibrate(cfg)
        est = project(step_s, rounds)
        console.print(f"budget: an SFT step takes {step_s:.3f} s here ({prec.get('precision')}, {prec.get('source')}; "
                      f"{REF_STEP_S:.2f} s in the reference run): about {est:.1f} min at full size for a "
                      f"{budget:g}-minute budget; round 0 runs at full size and measures this machine, then the "
                      "later rounds' SFT is sized to what is left")  # fmt: skip
        notes["budget"] = {
            "step_s": round(step_s, 4),
            "precision": prec,
            "budget_min": budget,
            "estimate_min": round(est, 1),
        }
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console) as bar:  # fmt: skip
        task = bar.add_task("round 0: cold start", total=None, info="")

        def say(kind: str, info: dict[str, Any]) -> None:
            r = info.get("round", 0)
            if kind == "tick":
                loss = f" loss {info['loss']:.3f}" if "loss" in info else ""
                step = info.get("i", info.get("n", ""))
                bar.update(task, description=f"round {r}: {info['stage']}", info=f"step {step}{loss}".strip())
            elif kind == "budget":
                console.print(f"budget: {esc(info['why'])}")
            elif kind == "landing":
                console.print(
                    f"{esc(info['landing'])} was the landing area of another lake: moved to {esc(info['moved'])}"
                )
            elif kind == "stage":
                console.print(f"[bold]round {r}[/] {info['stage']}: {esc(_summary(info['stage'], info['info']))}")
            else:
                bar.update(task, description=f"round 0: cold start ({info.get('what', kind)})", info="")

        rows = flywheel_demo(lake_uri, rounds, cfg, cold, say, notes, budget or None, started)
    console.print(rounds_rich_table(rows))
    if env == "miniwob":
        console.print(per_task_table(rows))
        st = rows[-1].env if rows else {}
        console.print(f"browsers {st.get('browsers')}, browser crashes {st.get('crashes')} (failed attempts), "
                      f"restarts {st.get('restarts')}, requests off 127.0.0.1 {st.get('net_attempts')}")  # fmt: skip
    console.print(f"demo finished in {(time.perf_counter() - t0) / 60:.1f} min; lake at {esc(lake_uri)}; continue it "
                  f"with `flywheel round run --lake {lake_uri}`")  # fmt: skip


def _summary(stage: str, info: Any) -> str:
    """One line per finished stage for the demo's log."""
    if stage == "intake":
        return ", ".join(f"{k} {v}" for k, v in info.items())
    if stage == "sample":
        return f"{info['attempts']} attempts by {info['policy_version']}, {info['env_passed']} passed the env, {info['episodes_added']} landed"
    if stage == "annotate":
        if "published" in info:
            return f"{info['published']} tasks published for people ({info['file']})"
        return (
            f"{info['episodes']} tasks annotated on {info['policy_version']}'s proposals: {info['accepted']} of "
            f"{info['steps']} proposals accepted ({100 * info['accept_rate']:.0f}%), {info['episodes_added']} landed"
        )
    if stage == "route":
        return f"{info.get('n_new')} new, {info.get('n_pass')} to SFT, {info.get('n_fail')} to CT"
    if stage == "rl" and info.get("mode") == "specialists":
        a = " ".join(f"{n}={w:g}" for n, w in info["alphas"].items())
        return f"specialists {', '.join(info['specialists'])} merged ({a}) ({info['wall_s']:.0f}s)"
    if stage in ("ct", "sft", "rl"):
        return f"{info['steps']} steps loss {info['loss_first'] or 0:.3f}->{info['loss_last'] or 0:.3f} ({info['wall_s']:.0f}s)"
    if stage == "evaluate":
        o = info["overall"]
        lv = " ".join(f"L{k} {100 * v['rate']:.0f}" for k, v in info["by_level"].items())
        if info.get("env", {}).get("name") == "miniwob":  # one level: the per-task rates say more
            lv = " ".join(f"{k} {100 * v['rate']:.0f}" for k, v in info["by_family"].items())
        out = f"held-out {100 * o['rate']:.1f}% [{100 * o['lo']:.1f}, {100 * o['hi']:.1f}] n={o['n']} ({lv})"
        e = info.get("rl_effect")
        if e:
            b = e["before"]
            out += (f"; before RL {100 * b['rate']:.1f}% [{100 * b['lo']:.1f}, {100 * b['hi']:.1f}]: RL "
                    f"{100 * e['delta']:+.1f} points (only RL passes {e['rl_only']}, only before {e['base_only']}, "
                    f"McNemar p={e['p']:.2g})")  # fmt: skip
        return out
    if stage == "summary":
        return "round table written" + (f", dashboard {info['dashboard']}" if info.get("dashboard") else "")
    return str(info)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
