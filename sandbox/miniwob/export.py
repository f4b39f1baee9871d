"""MiniWoB++ attempts -> flywheel episodes and the three input formats, through the sandbox's own functions.

MiniWoB attempts are sandbox Attempts (the task is a sandbox Task with family = the MiniWoB task name), so
sandbox.export and sandbox.rollout.to_episode take them as they are; this module only relabels the app and
platform (``miniwob`` / ``web`` instead of the sandbox's) and keeps MiniWoB's raw reward:

    to_episode(attempt, source, session_id, round)      schemas.records.Episode
    write_rollout_file(attempts, path, policy_version)  rollout file (JSONL/Parquet)
    write_think_aloud(attempt, out_dir)                 think-aloud bundle
    write_annotations(attempts, path)                   interactive-annotation session (attempts run with
                                                        demonstrators.Interactive)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from sandbox import export as _sx
from sandbox.rollout import Attempt
from sandbox.rollout import to_episode as _sandbox_episode

APP, PLATFORM = "miniwob", "web"

write_think_aloud = partial(_sx.write_think_aloud, app=APP, platform=PLATFORM)
write_annotations = partial(_sx.write_annotations, app=APP, platform=PLATFORM)

__all__ = [
    "APP",
    "PLATFORM",
    "to_episode",
    "to_rollout_attempt",
    "write_annotations",
    "write_rollout_file",
    "write_think_aloud",
]


def to_episode(
    a: Attempt,
    source: str,
    session_id: str,
    round: int = 0,
    screenshot_ref: Callable[[bytes], tuple[str, str]] | None = None,
    **overrides: Any,
) -> Any:
    t = a.task
    meta = {
        "verdict_reason": a.verdict.reason, "seed": t.seed, "level": t.level, "policy": a.policy, "benchmark": "miniwob++",
        **{k: a.meta[k] for k in ("raw_reward", "env_reward", "miniwob_reason", "wall_s", "error") if k in a.meta},
    }  # fmt: skip
    kw: dict[str, Any] = {"app": APP, "platform": PLATFORM, "meta": meta, **overrides}
    return _sandbox_episode(a, source, session_id, round, screenshot_ref, **kw)


def to_rollout_attempt(a: Attempt, policy_version: str, run_id: str | None = None, logprobs: Any = None) -> Any:
    return _sx.to_rollout(a, policy_version, run_id=run_id, logprobs=logprobs, app=APP, platform=PLATFORM)


def write_rollout_file(
    attempts: Iterable[Attempt], path: str | Path, policy_version: str, run_id: str | None = None, format: str = "jsonl"
) -> int:
    from ingest.formats.rollouts import write_rollouts

    return write_rollouts(path, (to_rollout_attempt(a, policy_version, run_id) for a in attempts), format=format)  # type: ignore[arg-type]
