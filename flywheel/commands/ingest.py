"""`flywheel ingest ...`: one sub-command per source. Each source module registers on the `ingest` group."""

from __future__ import annotations

import importlib
import importlib.util

import typer

ingest_app = typer.Typer(
    help="Ingest sources into the lake (idempotent; bad input is quarantined).", no_args_is_help=True
)

SOURCE_MODULES = (
    "flywheel.commands.ingest_think_aloud",  # ingest think-aloud PATH...
    "flywheel.commands.ingest_records",  # ingest annotations PATH... / ingest rollouts FILE...
)


def register(app: typer.Typer) -> None:
    for mod in SOURCE_MODULES:
        if importlib.util.find_spec(mod) is not None:
            importlib.import_module(mod).register(ingest_app)
    app.add_typer(ingest_app, name="ingest")
