"""One training_runs row per job: what it started from, what it produced, on which pile version, at what cost."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from storage.lake import content_id


@dataclass
class JobResult:
    """What a training job did. `output_checkpoint` is an object-store URI once published."""

    stage: str  # ct | sft | rl
    round: int
    base_checkpoint: str | None
    output_checkpoint: str | None = None
    backend: str = "builtin"
    pile_version: int | None = None
    samples: int = 0
    tokens: int = 0
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def run_id(self) -> str:
        return content_id(
            str(self.round),
            self.stage,
            self.backend,
            self.base_checkpoint or "",
            self.output_checkpoint or "",
            self.started_at.isoformat(),
        )

    def to_row(self) -> dict[str, Any]:
        finite = [x for x in self.losses if math.isfinite(x)]
        return {
            "run_id": self.run_id,
            "round": self.round,
            "stage": self.stage,
            "backend": self.backend,
            "base_checkpoint": self.base_checkpoint,
            "output_checkpoint": self.output_checkpoint,
            "pile_version": self.pile_version,
            "samples": self.samples,
            "tokens": self.tokens,
            "steps": self.steps,
            "loss_first": finite[0] if finite else None,
            "loss_last": finite[-1] if finite else None,
            "losses": [float(x) for x in self.losses],
            "metrics": json.dumps(self.metrics, sort_keys=True, default=str),
            "config": json.dumps(self.config, sort_keys=True, default=str),
            "wall_s": self.wall_s,
            "started_at": self.started_at,
        }


#: Entries the caller adds to the config of every run recorded in its scope (`run_tags`).
_TAGS: ContextVar[dict[str, Any]] = ContextVar("flywheel_run_tags", default={})  # noqa: B039 - never mutated


@contextmanager
def run_tags(**entries: Any) -> Iterator[None]:
    """Record `entries` in the config column of every training run recorded inside this block (in this thread).

    Why: a caller that runs a job through its public function (a specialist is an RL job on a task subset,
    flows/specialists.py) can say what the run was for in the run's own row, written once with the checkpoint,
    without every job's signature carrying it."""
    token = _TAGS.set({**_TAGS.get(), **entries})
    try:
        yield
    finally:
        _TAGS.reset(token)


def record_run(lake, result: JobResult) -> str:  # noqa: ANN001
    tags = _TAGS.get()
    if tags:
        result.config = {**result.config, **tags}
    lake.append("training_runs", [result.to_row()])
    return result.run_id
