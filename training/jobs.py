"""What every built-in job shares: resolve the base policy, time the job, publish the checkpoint, record the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from training.checkpoints import fetch, publish, version_of
from training.model import Policy
from training.runs import JobResult, record_run


@dataclass
class Base:
    """The policy a job starts from, and the checkpoint URI it came from (None for a freshly built model)."""

    policy: Policy
    uri: str | None


def resolve_base(lake, base: str | Policy) -> Base:  # noqa: ANN001
    if isinstance(base, Policy):
        return Base(base, base.uri)
    return Base(fetch(lake, base), base)


def finish(lake, result: JobResult, policy: Policy, t0: float, publish_checkpoint: bool = True) -> JobResult:  # noqa: ANN001
    """Publish the trained policy to the object store and write the training_runs row."""
    if publish_checkpoint:
        uri = publish(lake, policy, {"stage": result.stage, "round": result.round})
        result.output_checkpoint = uri
        policy.version = version_of(uri)
        policy.uri = uri
    result.steps = result.steps or len(result.losses)
    result.wall_s = time.perf_counter() - t0
    record_run(lake, result)
    return result


ProgressFn = Callable[[int, float], None]
