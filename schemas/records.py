"""Shared record types: Step, Episode, Verdict. Frozen dataclasses that convert to and from Arrow rows.

The lake stores episodes as Arrow rows (schemas/tables.py); these types are the Python view of one row, for
code that handles episodes one at a time (readers, validators' `check`, the sandbox). Bulk paths stay in Arrow.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from core import PIPELINE_VERSION
from schemas.actions import Action, ActionError, parse_action
from schemas.tables import EPISODES, STEP

SOURCES = ("think_aloud", "interactive", "rollout")


@dataclass(frozen=True)
class Proposal:
    thought: str
    action: str
    model_version: str | None = None
    score: float | None = None


@dataclass(frozen=True)
class Step:
    index: int
    action: str
    thought: str = ""
    raw_thought: str | None = None
    thought_flag: str | None = None
    t_start: float | None = None
    t_end: float | None = None
    observation: str | None = None
    screenshot_uri: str | None = None
    screenshot_sha256: str | None = None
    proposals: tuple[Proposal, ...] | None = None
    decision: str | None = None
    accepted_index: int | None = None
    decided_by: str | None = None
    logprob_sum: float | None = None
    token_logprobs: tuple[float, ...] | None = None
    reward: float | None = None

    def parsed(self) -> Action | None:
        """The parsed action, or None when the text does not follow the grammar."""
        try:
            return parse_action(self.action)
        except ActionError:
            return None

    def to_row(self) -> dict[str, Any]:
        a = self.parsed()
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["proposals"] = None if self.proposals is None else [asdict(p) for p in self.proposals]
        row["token_logprobs"] = None if self.token_logprobs is None else list(self.token_logprobs)
        row.update(
            action_type=a.kind if a else None,
            x=a.x if a else None,
            y=a.y if a else None,
            x2=a.x2 if a else None,
            y2=a.y2 if a else None,
            text=a.text if a else None,
            key=a.key if a else None,
            direction=a.direction if a else None,
        )
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Step:
        kw = {f.name: row.get(f.name) for f in fields(cls)}
        if kw["proposals"] is not None:
            kw["proposals"] = tuple(Proposal(**p) for p in kw["proposals"])
        if kw["token_logprobs"] is not None:
            kw["token_logprobs"] = tuple(kw["token_logprobs"])
        kw["thought"] = kw["thought"] or ""
        return cls(**kw)


@dataclass(frozen=True)
class Episode:
    session_id: str
    source: str
    task_id: str
    instruction: str
    steps: tuple[Step, ...]
    round: int = 0
    task_family: str | None = None
    difficulty: int | None = None
    app: str | None = None
    platform: str | None = None
    screen_width: int | None = None
    screen_height: int | None = None
    annotator: str | None = None
    group: str | None = None
    policy_version: str | None = None
    group_id: str | None = None
    attempt: int | None = None
    reference_answer: str | None = None
    final_answer: str | None = None
    outcome: str | None = None
    env_reward: float | None = None
    env_passed: bool | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    episode_id: str = ""
    pipeline_version: str = PIPELINE_VERSION
    ingested_at: datetime | None = None

    def __post_init__(self) -> None:
        if not self.episode_id:
            object.__setattr__(self, "episode_id", self.content_hash())

    def content_hash(self) -> str:
        """The episode's identity: what was attempted and what was done, not when it was ingested.

        Source, session, task, instruction, attempt and the steps' actions and thoughts; re-ingesting the same
        input gives the same id, so appends are idempotent.
        """
        h = hashlib.sha256()
        for part in (self.source, self.session_id, self.task_id, self.instruction, str(self.attempt), self.group_id):
            h.update((part or "").encode())
            h.update(b"\x1f")
        for s in self.steps:
            h.update(s.action.encode())
            h.update(b"\x1e")
            h.update((s.thought or "").encode())
            h.update(b"\x1e")
            h.update((s.screenshot_sha256 or "").encode())
            h.update(b"\x1d")
        return h.hexdigest()[:32]

    def with_round(self, r: int) -> Episode:
        return replace(self, round=r)

    def to_row(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["steps"] = [s.to_row() for s in self.steps]
        row["n_steps"] = len(self.steps)
        row["meta"] = json.dumps(self.meta, sort_keys=True, default=str) if self.meta else None
        row["ingested_at"] = self.ingested_at or datetime.now(UTC)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Episode:
        kw = {f.name: row.get(f.name) for f in fields(cls)}
        kw["steps"] = tuple(Step.from_row(s) for s in row.get("steps") or [])
        kw["meta"] = json.loads(row["meta"]) if row.get("meta") else {}
        return cls(**kw)


def episodes_to_table(episodes: list[Episode], schema: pa.Schema = EPISODES) -> pa.Table:
    """Episodes -> an Arrow table with the explicit episodes schema."""
    return pa.Table.from_pylist([e.to_row() for e in episodes], schema=schema)


def table_to_episodes(table: pa.Table) -> list[Episode]:
    return [Episode.from_row(r) for r in table.to_pylist()]


@dataclass(frozen=True)
class Verdict:
    """A validator's answer for one episode: pass/fail, a fixed reason code ("ok" on pass), a score, details."""

    passed: bool
    reason: str = "ok"
    score: float | None = None
    details: dict[str, Any] | None = None

    @classmethod
    def ok(cls, score: float | None = 1.0, **details: Any) -> Verdict:
        return cls(True, "ok", score, details or None)

    @classmethod
    def fail(cls, reason: str, score: float | None = 0.0, **details: Any) -> Verdict:
        return cls(False, reason, score, details or None)


assert STEP.names[0] == "index"  # keep Step.to_row aligned with the Arrow struct
