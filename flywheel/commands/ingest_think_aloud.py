"""`flywheel ingest think-aloud PATH...`: bundles, AgentNet Tool folders or landing folders -> the lake."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.console import console, esc
from flywheel.commands.common import LakeOpt, open_lake


def think_aloud(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Bundles (folder, .zip, .tar.gz), AgentNet Tool folders, or landing folders of them."),
    ],
    lake: LakeOpt = None,
    round: Annotated[int, typer.Option("--round", help="Flywheel round to record on the rows.")] = 0,
    cleanup: Annotated[
        str | None, typer.Option("--cleanup", help="Transcript cleanup backend: rules or llm (default: settings).")
    ] = None,
) -> None:
    """Ingest think-aloud sessions: events -> actions, ASR -> cleaned thoughts, aligned, PII-redacted, landed.

    Bad inputs go to the quarantine table with a reason; re-running adds nothing.

    Example: flywheel ingest think-aloud ./landing/session-01.zip ../shared/external/opencua-session --lake ./lake
    """
    from ingest.think_aloud import IngestOptions, Outcome, discover, ingest_paths

    lk = open_lake(lake, create=True)
    opts = IngestOptions.from_settings(**({"cleanup_backend": cleanup} if cleanup else {}))
    inputs = discover(paths)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:  # fmt: skip
        job = bar.add_task("ingesting", total=len(inputs))

        def done(p: Path, o: Outcome) -> None:
            bar.update(job, description=f"ingested {esc(p.name)}")
            if o.quarantined:
                q = o.quarantined[0]
                console.print(
                    f"[yellow]quarantined[/] {esc(p.name)}: {esc(q.error_type)}: {esc(q.error)}", highlight=False
                )
            bar.advance(job)

        res = ingest_paths(lk, paths, round, opts, done)  # one batch: its Whisper model is released at the end
    skipped = res.extra["skipped_already_landed"]
    console.print(
        f"{len(inputs)} input(s): {res.episodes_added} episode(s) and {res.sessions_added} session(s) landed, "
        f"{res.quarantined_added} quarantined, {skipped} already in the lake"
    )


def register(ingest_app: typer.Typer) -> None:
    ingest_app.command("think-aloud")(think_aloud)
