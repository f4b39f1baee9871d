"""Landing: what a reader produced (episodes, session rows, quarantine rows) goes into the lake, idempotently.

Readers never raise on bad input; they return Quarantined records with a reason. This module is the one place
that turns those results into lake rows, so every ingestion path counts and stores them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from core import PIPELINE_VERSION
from schemas.records import Episode, episodes_to_table
from schemas.tables import QUARANTINE
from storage.lake import Lake, content_id


@dataclass(frozen=True)
class Quarantined:
    """An input that could not become an episode: where it was, what kind of error, and a readable message."""

    source: str
    landed_uri: str
    error_type: str  # a fixed code, e.g. "invalid_json", "audio_undecodable", "path_traversal"
    error: str
    locator: str | None = None  # "line 1234", "events.jsonl", ...
    round: int | None = None

    def to_row(self) -> dict[str, Any]:
        return {
            "quarantine_id": content_id(self.source, self.landed_uri, self.locator or "", self.error_type),
            "source": self.source,
            "landed_uri": self.landed_uri,
            "locator": self.locator,
            "error_type": self.error_type,
            "error": self.error[:2000],
            "round": self.round,
            "pipeline_version": PIPELINE_VERSION,
            "quarantined_at": datetime.now(UTC),
        }


@dataclass
class LandResult:
    episodes_added: int = 0
    sessions_added: int = 0
    quarantined_added: int = 0
    episodes_seen: int = 0
    quarantined_seen: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def __iadd__(self, other: LandResult) -> LandResult:
        for k in ("episodes_added", "sessions_added", "quarantined_added", "episodes_seen", "quarantined_seen"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        for k, v in other.extra.items():
            self.extra[k] = self.extra.get(k, 0) + v
        return self


def quarantine_table(items: Iterable[Quarantined]) -> pa.Table:
    return pa.Table.from_pylist([q.to_row() for q in items], schema=QUARANTINE)


def land(
    lake: Lake,
    episodes: list[Episode] | pa.Table | None = None,
    sessions: list[dict[str, Any]] | pa.Table | None = None,
    quarantined: list[Quarantined] | None = None,
) -> LandResult:
    """Append episodes, session rows and quarantine rows (each idempotent on its key).

    Order matters for crash safety: quarantine and episodes first, the session row last, so a session that shows
    as landed has all its episodes in the lake.
    """
    res = LandResult()
    if quarantined:
        res.quarantined_seen = len(quarantined)
        res.quarantined_added = lake.append("quarantine", quarantine_table(quarantined))
    if episodes is not None:
        table = episodes if isinstance(episodes, pa.Table) else episodes_to_table(episodes)
        res.episodes_seen = table.num_rows
        res.episodes_added = lake.append("episodes", table)
    if sessions is not None and len(sessions):
        res.sessions_added = lake.append("sessions", sessions)
    return res
