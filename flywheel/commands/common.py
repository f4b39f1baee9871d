"""Options and helpers shared by command modules."""

from __future__ import annotations

from typing import Annotated

import typer

from core.settings import get_settings
from storage.lake import Lake

LakeOpt = Annotated[
    str | None,
    typer.Option("--lake", help="Lake location: a folder or s3://bucket/prefix (default: settings, ./lake)."),
]


def open_lake(lake: str | None, create: bool = False) -> Lake:
    return Lake.open(lake or get_settings().lake, create=create)
