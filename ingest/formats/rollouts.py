"""Rollout files (format `flywheel.rollout/1`): one line (JSONL) or one row (Parquet) per model attempt.

Rejection sampling and the sandbox write these; `ingest.rollouts` streams them into the episodes table. The
contract is schemas/rollout.schema.json; the Arrow form below (ROLLOUT) is the same thing with explicit types,
used both to write Parquet and to parse JSONL blocks without type inference.

Writer (streaming, one attempt at a time, constant memory):

    write_rollouts(path, attempts, format="jsonl" | "parquet", *, batch_size=1024) -> int   # attempts written

`attempts` is any iterable of RolloutAttempt or of plain dicts with the same keys (dicts are checked the
same way). NaN/inf log-probabilities, rewards outside [-1, 1], unknown terminations or a missing required
field raise ValueError before anything is written for that attempt, so a writer never produces a file that
the reader would quarantine. Action strings are NOT checked: an unreadable action is a legitimate outcome
(termination="unreadable_action", reward -1).

Example:

    from ingest.formats.rollouts import RolloutAttempt, RolloutStep, write_rollouts
    steps = (RolloutStep(thought="Open the menu.", action="click(point='<point>10 20</point>')",
                         logprob_sum=-3.2, token_logprobs=(-1.0, -2.2)),
             RolloutStep(thought="Done.", action="finished(content='ok')", logprob_sum=-0.4))
    a = RolloutAttempt(task_id="t1", group_id="g1", attempt=0, policy_version="ckpt-3",
                       instruction="Open the menu", steps=steps, reward=1.0, passed=True,
                       termination="finished")
    write_rollouts("out.jsonl", [a])
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

FORMAT = "flywheel.rollout/1"
TERMINATIONS = ("finished", "step_limit", "unreadable_action")
#: Documented range of the environment's reward; an unreadable action scores REWARD_UNREADABLE.
REWARD_MIN, REWARD_MAX = -1.0, 1.0
REWARD_UNREADABLE = -1.0
REQUIRED = ("task_id", "group_id", "attempt", "policy_version", "instruction", "steps", "termination")

#: One step of an attempt, as written in the file.
ROLLOUT_STEP = pa.struct(
    [
        pa.field("thought", pa.string()),
        pa.field("action", pa.string()),
        pa.field("observation", pa.string()),
        pa.field("screenshot_uri", pa.string()),
        pa.field("screenshot_sha256", pa.string()),
        pa.field("t_start", pa.float64()),
        pa.field("t_end", pa.float64()),
        pa.field("logprob_sum", pa.float64()),
        pa.field("token_logprobs", pa.list_(pa.float32())),
        pa.field("reward", pa.float64()),
    ]
)

#: One attempt, as written in the file (Parquet schema; also the explicit schema for parsing JSONL).
ROLLOUT = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("task_id", pa.string()),
        pa.field("group_id", pa.string()),
        pa.field("attempt", pa.int64()),
        pa.field("policy_version", pa.string()),
        pa.field("instruction", pa.string()),
        pa.field("task_family", pa.string()),
        pa.field("difficulty", pa.int64()),
        pa.field("reference_answer", pa.string()),
        pa.field("app", pa.string()),
        pa.field("platform", pa.string()),
        pa.field("screen_width", pa.int64()),
        pa.field("screen_height", pa.int64()),
        pa.field("steps", pa.list_(ROLLOUT_STEP)),
        pa.field("reward", pa.float64()),
        pa.field("passed", pa.bool_()),
        pa.field("termination", pa.string()),
        pa.field("final_answer", pa.string()),
    ]
)


@dataclass(frozen=True)
class RolloutStep:
    """One step of a model attempt: the model's text (thought + action) and what it cost in log-probability."""

    action: str
    thought: str = ""
    observation: str | None = None
    screenshot_uri: str | None = None
    screenshot_sha256: str | None = None
    t_start: float | None = None
    t_end: float | None = None
    logprob_sum: float | None = None
    token_logprobs: tuple[float, ...] | None = None
    reward: float | None = None


@dataclass(frozen=True)
class RolloutAttempt:
    """One attempt at one task by one policy version; attempts of a rejection-sampling group share group_id."""

    task_id: str
    group_id: str
    attempt: int
    policy_version: str
    instruction: str
    steps: tuple[RolloutStep, ...]
    termination: Literal["finished", "step_limit", "unreadable_action"]
    reward: float | None = None
    passed: bool | None = None
    final_answer: str | None = None
    task_family: str | None = None
    difficulty: int | None = None
    reference_answer: str | None = None
    app: str | None = None
    platform: str | None = None
    screen_width: int | None = None
    screen_height: int | None = None
    run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = [
            {**s, "token_logprobs": None if s["token_logprobs"] is None else list(s["token_logprobs"])}
            for s in d["steps"]
        ]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RolloutAttempt:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        step_keys = {f.name for f in fields(RolloutStep)}
        kw["steps"] = tuple(
            RolloutStep(
                **{
                    k: (tuple(v) if k == "token_logprobs" and v is not None else v)
                    for k, v in s.items()
                    if k in step_keys
                }
            )
            for s in d.get("steps") or ()
        )
        return cls(**kw)


def check_attempt(d: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first problem of one attempt as (error_type, message), or None when it is well-formed.

    The same rules the columnar reader applies (ingest/rollouts.py), here for one dict: used by the writer and
    by the reader's per-line fallback, so both sides agree on what a good line is.
    """
    missing = [k for k in REQUIRED if d.get(k) is None]
    if missing:
        return "missing_field", f"missing required field(s): {', '.join(missing)}"
    for k in ("task_id", "group_id", "policy_version", "instruction", "termination"):
        if not isinstance(d[k], str):
            return "wrong_type", f"{k} must be a string, got {type(d[k]).__name__}"
    if not isinstance(d["attempt"], int) or isinstance(d["attempt"], bool) or d["attempt"] < 0:
        return "wrong_type", f"attempt must be a non-negative integer, got {d['attempt']!r}"
    if not isinstance(d["steps"], list | tuple):
        return "wrong_type", f"steps must be a list, got {type(d['steps']).__name__}"
    if d["termination"] not in TERMINATIONS:
        return "bad_termination", f"termination {d['termination']!r} is not one of {', '.join(TERMINATIONS)}"
    r = d.get("reward")
    if r is not None:
        if not isinstance(r, int | float) or isinstance(r, bool):
            return "wrong_type", f"reward must be a number, got {type(r).__name__}"
        if not (REWARD_MIN <= r <= REWARD_MAX):  # also refuses NaN
            return "reward_out_of_range", f"reward {r!r} is outside [{REWARD_MIN:g}, {REWARD_MAX:g}]"
    for i, s in enumerate(d["steps"]):
        if not isinstance(s, Mapping):
            return "wrong_type", f"step {i} must be an object"
        if not isinstance(s.get("action"), str):
            kind = "missing_field" if s.get("action") is None else "wrong_type"
            return kind, f"step {i}: action must be a string"
        tl = s.get("token_logprobs")
        if tl is not None and not isinstance(tl, list | tuple):  # e.g. `true`: refused, not a crash (found by fuzzing)
            return "wrong_type", f"step {i}: token_logprobs must be a list of numbers, got {type(tl).__name__}"
        lp = [s.get("logprob_sum")] + list(tl or [])
        if any(isinstance(v, float) and not math.isfinite(v) for v in lp):
            return "nan_logprob", f"step {i}: log-probabilities must be finite numbers (NaN or infinity found)"
    return None


def _as_dict(a: RolloutAttempt | Mapping[str, Any]) -> dict[str, Any]:
    d = a.to_dict() if isinstance(a, RolloutAttempt) else dict(a)
    problem = check_attempt(d)
    if problem:
        raise ValueError(f"rollout attempt {d.get('task_id')!r}/{d.get('attempt')!r}: {problem[1]}")
    return d


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    """Drop null fields (absent and null read the same), keeping lines short."""
    out = {k: v for k, v in d.items() if v is not None}
    out["steps"] = [{k: v for k, v in s.items() if v is not None} for s in d["steps"]]
    return out


def _batches(dicts: Iterator[dict[str, Any]], n: int) -> Iterator[list[dict[str, Any]]]:
    buf: list[dict[str, Any]] = []
    for d in dicts:
        buf.append(d)
        if len(buf) >= n:
            yield buf
            buf = []
    if buf:
        yield buf


def write_rollouts(
    path: str | Path,
    attempts: Iterable[RolloutAttempt | Mapping[str, Any]],
    format: Literal["jsonl", "parquet"] = "jsonl",
    *,
    batch_size: int = 1024,
) -> int:
    """Stream attempts to a rollout file (overwritten); return how many were written.

    JSONL: one compact JSON object per line. Parquet: the ROLLOUT schema, one row group per `batch_size`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dicts = (_as_dict(a) for a in attempts)
    n = 0
    if format == "jsonl":
        with path.open("w", encoding="utf-8") as f:
            for d in dicts:
                f.write(json.dumps(_compact(d), ensure_ascii=False, allow_nan=False, separators=(",", ":")))
                f.write("\n")
                n += 1
        return n
    if format == "parquet":
        with pq.ParquetWriter(path, ROLLOUT, compression="zstd") as w:
            for chunk in _batches(dicts, batch_size):
                rows = [{k: d.get(k) for k in ROLLOUT.names} for d in chunk]
                w.write_table(pa.Table.from_pylist(rows, schema=ROLLOUT))
                n += len(chunk)
        return n
    raise ValueError(f"unknown rollout format {format!r}; use 'jsonl' or 'parquet'")
