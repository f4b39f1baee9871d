"""Rejection sampling: the newest checkpoint makes K attempts per task at temperature 1.0 in the sandbox.

The attempts are written as a rollout file (policy version, per-token log-probabilities, the environment's
reward) and enter the lake only through the rollout ingestion path, exactly like rollouts from anywhere else;
validation and routing then decide which join SFT and which CT. Screenshots of each step are stored in the
object store (content-addressed), as a real sampler's would be, because the routing policy requires them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from schemas.prompt import PromptConfig
from training.config import SamplingConfig
from training.convert import to_attempt
from training.model import Policy
from training.procs import split_episodes
from training.rollout import TaskInfo, Trajectory


@dataclass(frozen=True)
class SamplingResult:
    path: str
    policy_version: str
    attempts: int
    passed: int  # by the environment's verifier (routing decides V(s))
    episodes_added: int
    quarantined: int
    wall_s: float


def attach_screenshots(
    lake,  # noqa: ANN001
    trajs: Sequence[Trajectory],
    render: Callable[[TaskInfo, list[str]], list[bytes]],
    threads: int = 1,
) -> list:
    """Render the screen before each step (by replaying the actions) and store it; returns per-trajectory lists of
    (uri, sha256). `render(task, actions)` yields one PNG per action. `threads` > 1 renders that many trajectories at
    once, for a renderer that may run in threads (`EnvBackend.render_threads`)."""
    from concurrent.futures import ThreadPoolExecutor

    from storage.objects import sha256_hex

    def shots(tr: Trajectory) -> list[bytes]:
        return render(tr.task, [s.action for s in tr.steps])

    out = []
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for pngs in pool.map(shots, trajs) if threads > 1 else map(shots, trajs):
            out.append([(lake.objects.put_object(png, ".png"), sha256_hex(png)) for png in pngs])
    return out


def rejection_sample(
    lake,  # noqa: ANN001
    round: int,
    policy: Policy,
    tasks: Sequence[TaskInfo],
    landing: str | Path,
    cfg: SamplingConfig = SamplingConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    render: Callable[[TaskInfo, list[str]], list[bytes]] | None = None,
    on_step: Callable[[int], None] | None = None,
    render_threads: int = 1,
) -> SamplingResult:
    """K attempts per task with `policy`; write them to `landing`/round-R-<version>.jsonl and ingest that file."""
    from ingest.formats.rollouts import write_rollouts
    from ingest.rollouts import ingest_rollout_file

    t0 = time.perf_counter()
    kw = {"attempts": cfg.attempts, "temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens,
          "prompt_cfg": prompt_cfg}  # fmt: skip
    trajs = split_episodes(policy, tasks, cfg.processes, seed=cfg.seed + 7919 * round, on_step=on_step, **kw)
    attempts = [to_attempt(tr, round) for tr in trajs]
    if render is not None:
        for i, refs in enumerate(attach_screenshots(lake, trajs, render, render_threads)):
            steps = tuple(
                replace(s, screenshot_uri=u, screenshot_sha256=h) for s, (u, h) in zip(attempts[i].steps, refs)
            )
            attempts[i] = replace(attempts[i], steps=steps)
    path = Path(landing) / f"rollouts-round{round}-{policy.version}.jsonl"
    write_rollouts(path, attempts)
    res = ingest_rollout_file(lake, path, round=round)
    return SamplingResult(
        str(path),
        policy.version,
        len(trajs),
        sum(tr.passed for tr in trajs),
        res.result.episodes_added,
        res.result.quarantined_added,
        time.perf_counter() - t0,
    )
