"""A think-aloud session as read from disk (a bundle or an AgentNet recording), before any model ran, and the error
that stops one from landing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from core.errors import InputError
from ingest.formats.bundle import BundleManifest


class IngestError(InputError):
    """A session that cannot land; `code` becomes the quarantine error_type."""


@dataclass
class SessionData:
    """One session read from disk, on the session clock, before any model ran."""

    uri: str
    folder: Path
    kind: str  # bundle | agentnet
    manifest: BundleManifest
    events: pa.Table
    content_sha256: str
    problems: list[str] = field(default_factory=list)
    drop_after: float | None = None  # actions starting after this are recorder control (AgentNet stop hotkey)
    validate_size: tuple[int, int] | None = None  # screen extent for the on-screen check, when it differs
    meta: dict[str, Any] = field(default_factory=dict)
