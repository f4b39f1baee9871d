"""The `rounds` table's one owner: writing a round's row (merged column by column, its JSON columns key by key) and
reading rows back as typed records, so routing, evaluation, the round engine, the CLI and the demo never parse the
row's JSON themselves.

A round's row is written by several stages (routing: counts and pass rates; evaluation: eval_*; the engine: stage
status, the config it ran with, annotation and environment figures); `update_round` merges, so no stage erases
another's entries. `RoundRecord` is what readers get: the columns, `stage_status` and `breakdown` parsed, and the
breakdown's well-known entries as properties.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc

JSON_COLUMNS = ("stage_status", "breakdown")


def update_round(lake: Any, round: int, **fields: Any) -> dict[str, Any]:
    """Merge `fields` into the rounds row of `round` (creating it), leaving every other column as it was.

    JSON columns (stage_status, breakdown) are merged key by key at the top level, so one stage never erases
    another's entries.
    """
    existing = lake.read("rounds", filter=pc.field("round") == round).to_pylist()
    row: dict[str, Any] = existing[0] if existing else {"round": round}
    for k, v in fields.items():
        if k in JSON_COLUMNS and v is not None:
            old = json.loads(row[k]) if row.get(k) else {}
            new = v if isinstance(v, dict) else json.loads(v)
            row[k] = json.dumps({**old, **new}, sort_keys=True, default=str)
        else:
            row[k] = v
    row["round"] = round
    row["updated_at"] = datetime.now(UTC)
    lake.upsert("rounds", [row])
    return row


def _loads(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        out = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}


@dataclass(frozen=True)
class SpecialistRun:
    """One specialist of a round that ended with specialists + merge: its world and the checkpoint it reached."""

    name: str
    env: str | None = None
    families: tuple[str, ...] | None = None  # None: all of the environment's
    levels: tuple[int, ...] | None = None
    checkpoint: str | None = None
    run_id: str | None = None

    def subset(self) -> str:
        """The world in a few words: `sandbox: fill_form, checkboxes (levels 1, 2)`."""
        fam = ", ".join(self.families) if self.families else "all tasks"
        lv = f" (levels {', '.join(map(str, self.levels))})" if self.levels else ""
        return f"{self.env or '?'}: {fam}{lv}"


@dataclass(frozen=True)
class RLSummary:
    """How a round's RL stage ended: one joint RL job, or specialists merged with these alphas (chosen by a sweep
    when `sweep` says so: {"objective", "kept_alpha", "first"})."""

    mode: str  # joint | specialists
    checkpoint: str | None = None  # the RL stage's checkpoint: the joint job's, or the merged one
    base: str | None = None  # the checkpoint RL started from (the specialists' common checkpoint)
    specialists: tuple[SpecialistRun, ...] = ()
    alphas: dict[str, float] = field(default_factory=dict)
    sweep: dict[str, Any] | None = None

    def describe(self) -> str:
        if self.mode != "specialists":
            return self.mode
        a = " ".join(f"{n}={w:g}" for n, w in self.alphas.items())
        how = f", sweep by {self.sweep['objective']}" if self.sweep else ""
        return f"specialists ({a}{how})"


@dataclass(frozen=True)
class RoundRecord:
    """One row of `rounds`, typed: the columns plus the parsed JSON columns."""

    round: int
    n_new: int | None = None
    n_pass: int | None = None
    n_fail: int | None = None
    pass_rate: float | None = None
    pass_rate_lo: float | None = None
    pass_rate_hi: float | None = None
    eval_n: int | None = None
    eval_pass_rate: float | None = None
    eval_pass_rate_lo: float | None = None
    eval_pass_rate_hi: float | None = None
    sft_size: int | None = None
    ct_size: int | None = None
    policy_version: str | None = None
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> {status, seconds, checkpoint, ...}
    breakdown: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RoundRecord:
        names = {f for f in cls.__dataclass_fields__ if f not in ("stages", "breakdown")}
        return cls(
            **{k: row.get(k) for k in names},
            stages=_loads(row.get("stage_status")),
            breakdown=_loads(row.get("breakdown")),
        )

    # ---- the breakdown's entries, each written by one stage
    @property
    def eval(self) -> dict[str, Any]:
        """Held-out evaluation: overall, by_level, by_family (training.evaluate)."""
        return self.breakdown.get("eval") or {}

    def eval_rates(self, by: str) -> dict[Any, float]:
        """{group: held-out pass rate} by "level" (int keys) or "family"."""
        raw = self.eval.get(f"by_{by}") or {}
        return {(int(k) if by == "level" else k): v["rate"] for k, v in raw.items()}

    @property
    def sampled(self) -> dict[str, Any]:
        """P(V=1|r) of the model's own new attempts (routing's by_source entry for rollouts)."""
        return (self.breakdown.get("by_source") or {}).get("rollout") or {}

    @property
    def annotation(self) -> dict[str, Any]:
        return self.breakdown.get("annotation") or {}

    @property
    def env(self) -> dict[str, Any]:
        return self.breakdown.get("env") or {}

    @property
    def demonstrator_eval(self) -> dict[str, float]:
        return {k: v["rate"] for k, v in (self.breakdown.get("demonstrator_eval") or {}).items()}

    @property
    def config(self) -> dict[str, Any] | None:
        """The round configuration the round ran with (flows.config.RoundConfig as a dict), when recorded."""
        return self.breakdown.get("config")

    @property
    def landing(self) -> str | None:
        """The landing area the round ran with, when recorded."""
        return self.breakdown.get("landing")

    @property
    def rl_effect(self) -> dict[str, Any]:
        """Held-out before and after the round's RL stage, when measured."""
        return self.breakdown.get("rl_effect") or {}

    @property
    def rl(self) -> RLSummary | None:
        """How the round's RL ended (None when it ran no RL). Rounds recorded before the RL mode was written say
        "joint" when their RL stage finished."""
        b = self.breakdown.get("rl")
        if not b:
            st = self.stages.get("rl") or {}
            return RLSummary("joint", st.get("checkpoint"), st.get("base")) if st.get("status") == "done" else None
        merge = b.get("merge") or {}
        sps = tuple(
            SpecialistRun(s["name"], s.get("env"), tuple(s["families"]) if s.get("families") else None,
                          tuple(s["levels"]) if s.get("levels") else None, s.get("checkpoint"), s.get("run_id"))
            for s in b.get("specialists") or []
        )  # fmt: skip
        ck = merge.get("checkpoint") if b.get("mode") == "specialists" else b.get("checkpoint")
        return RLSummary(b.get("mode", "joint"), ck, b.get("base"), sps, dict(merge.get("alphas") or {}),
                         merge.get("sweep"))  # fmt: skip

    @property
    def rl_mode(self) -> str | None:
        return self.rl.mode if self.rl else None

    @property
    def mixed(self) -> dict[str, Any]:
        """The merged model on the mixed held-out set, when the round ran specialists: {"rates": {part: Rate as a
        dict, ..., "overall": ...}, "composed", "n", "members"?} (flows/specialists.py `mixed_eval`)."""
        return self.breakdown.get("mixed") or {}

    def status(self, stage: str) -> str | None:
        return (self.stages.get(stage) or {}).get("status")


def read_rounds(lake: Any) -> list[RoundRecord]:
    """Every round's record, in round order."""
    rows = lake.read("rounds").to_pylist()
    return sorted((RoundRecord.from_row(r) for r in rows), key=lambda r: r.round)


def read_round(lake: Any, round: int) -> RoundRecord | None:
    rows = lake.read("rounds", filter=pc.field("round") == round).to_pylist()
    return RoundRecord.from_row(rows[0]) if rows else None


def stage_status(lake: Any, round: int) -> dict[str, dict[str, Any]]:
    rec = read_round(lake, round)
    return rec.stages if rec else {}
