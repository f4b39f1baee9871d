"""`flywheel ingest annotations PATH...` and `flywheel ingest rollouts FILE...`: interactive sessions and
rejection-sampled rollouts -> the lake (formats: docs/annotations-and-rollouts.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from core.console import console, esc
from flywheel.commands.common import LakeOpt, open_lake

RoundOpt = Annotated[int, typer.Option("--round", help="Flywheel round to record on the rows.")]


def annotations(
    paths: Annotated[
        list[Path], typer.Argument(help="Session files (flywheel.annotation/1 JSON) or folders of *.json.")
    ],
    lake: LakeOpt = None,
    round: RoundOpt = 0,
) -> None:
    """Ingest interactive-annotation sessions: episodes with proposals and decisions, override rates, preference pairs.

    Bad sessions or episodes go to the quarantine table with a reason; re-running adds nothing.

    Example: flywheel ingest annotations examples/annotations --lake ./lake
    """
    from ingest.annotations import land_session, read_session, session_files

    lk = open_lake(lake, create=True)
    files = session_files(list(paths))
    added = pairs = quarantined = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:  # fmt: skip
        job = bar.add_task("sessions", total=len(files))
        for f in files:
            bar.update(job, description=f"ingesting {esc(f.name)}")
            s = read_session(f, round=round)
            res, n = land_session(lk, s)
            added, pairs, quarantined = added + res.episodes_added, pairs + n, quarantined + res.quarantined_added
            rate = s.session.get("override_rate")
            console.print(
                f"{esc(f.name)}: {len(s.episodes)} episode(s), override rate {'-' if rate is None else f'{rate:.0%}'}",
                highlight=False,
            )
            for q in s.quarantined:
                console.print(
                    f"  [yellow]quarantined[/] {esc(q.locator or f.name)}: {esc(q.error_type)}: {esc(q.error)}",
                    highlight=False,
                )
            bar.advance(job)
    console.print(
        f"{len(files)} file(s): {added} episode(s) and {pairs} preference pair(s) landed, {quarantined} quarantined"
    )


def rollouts(
    files: Annotated[list[Path], typer.Argument(help="Rollout files: .jsonl (one attempt per line) or .parquet.")],
    lake: LakeOpt = None,
    round: RoundOpt = 0,
    block_mb: Annotated[int, typer.Option("--block-mb", help="JSONL bytes parsed at once (bounds memory).")] = 64,
) -> None:
    """Stream rejection-sampled rollout files into the episodes table (a multi-GB file is never loaded whole).

    Unreadable lines go to the quarantine table naming the line; re-ingesting a file, or one that overlaps it,
    adds only the new attempts.

    Example: flywheel ingest rollouts runs/round4.jsonl runs/round4-extra.parquet --lake ./lake --round 4
    """
    from ingest.rollouts import ingest_rollout_file

    lk = open_lake(lake, create=True)
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"{f}: no such file")
    seen = added = quarantined = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TextColumn("{task.fields[added]:,} added"), TimeElapsedColumn(), console=console,
                  transient=True) as bar:  # fmt: skip
        for f in files:
            job = bar.add_task(esc(f.name), total=f.stat().st_size, added=0)

            def progress(done: int, total: int, n: int, job=job, size=f.stat().st_size) -> None:  # noqa: ANN001
                bar.update(job, completed=done * size // max(total, 1), added=n)

            r = ingest_rollout_file(lk, f, round=round, block_bytes=block_mb << 20, progress=progress)
            bar.update(job, completed=f.stat().st_size)
            seen, added, quarantined = (
                seen + r.result.episodes_seen,
                added + r.result.episodes_added,
                quarantined + r.result.quarantined_seen,
            )
            codes = ", ".join(f"{k} x{v}" for k, v in sorted(r.quarantine_codes.items())) or "none"
            console.print(
                f"{esc(f.name)}: {r.result.episodes_seen:,} attempt(s), {r.result.episodes_added:,} new, "
                f"{r.n_steps:,} steps; quarantined: {esc(codes)}",
                highlight=False,
            )
    console.print(f"{len(files)} file(s): {added:,} of {seen:,} episode(s) new, {quarantined} line(s) quarantined")


def register(ingest_app: typer.Typer) -> None:
    ingest_app.command("annotations")(annotations)
    ingest_app.command("rollouts")(rollouts)
