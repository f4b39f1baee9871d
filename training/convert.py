"""Trajectories (the policy acting in an environment) -> rollout-file attempts and Episode records.

Attempts go to disk in the rollout format and enter the lake only through the rollout ingestion path; Episodes
are the per-episode view the validators' reward adapter scores. One mapping for both, so they agree.
"""

from __future__ import annotations

from ingest.formats.rollouts import REWARD_UNREADABLE, RolloutAttempt, RolloutStep
from schemas.records import Episode, Step
from storage.lake import content_id
from training.rollout import Trajectory


def env_reward(tr: Trajectory) -> float:
    """The environment's reward in the rollout format's range: 1 pass, 0 fail, -1 unreadable action."""
    if tr.termination == "unreadable_action":
        return REWARD_UNREADABLE
    return 1.0 if tr.passed else 0.0


def group_id(round: int, task_id: str, policy_version: str) -> str:
    """Attempts of one task by one policy in one round share a group."""
    return "g-" + content_id(str(round), task_id, policy_version)[:20]


def to_attempt(tr: Trajectory, round: int, run_id: str | None = None) -> RolloutAttempt:
    steps = tuple(
        RolloutStep(
            action=s.action,
            thought=s.thought,
            observation=s.observation,
            logprob_sum=float(sum(s.logprobs)),
            token_logprobs=tuple(float(x) for x in s.logprobs),
        )
        for s in tr.steps
    )
    t = tr.task
    return RolloutAttempt(
        task_id=t.task_id,
        group_id=group_id(round, t.task_id, tr.policy_version),
        attempt=tr.attempt,
        policy_version=tr.policy_version,
        instruction=t.instruction,
        steps=steps,
        termination=tr.termination,  # type: ignore[arg-type]
        reward=env_reward(tr),
        passed=tr.passed,
        final_answer=tr.final_answer,
        task_family=t.family,
        difficulty=t.level,
        reference_answer=t.reference_answer,
        screen_width=t.screen_width,
        screen_height=t.screen_height,
        app=t.app,
        platform=t.platform,
        run_id=run_id,
    )


def to_episode(tr: Trajectory, round: int = 0) -> Episode:
    """The Episode a validator sees for this trajectory (what ingestion would land, minus lake bookkeeping)."""
    t = tr.task
    steps = tuple(
        Step(
            index=i,
            action=s.action,
            thought=s.thought,
            observation=s.observation,
            logprob_sum=float(sum(s.logprobs)),
            token_logprobs=tuple(s.logprobs),
        )
        for i, s in enumerate(tr.steps)
    )
    return Episode(
        session_id=f"policy-{tr.policy_version}",
        source="rollout",
        task_id=t.task_id,
        instruction=t.instruction,
        steps=steps,
        round=round,
        task_family=t.family,
        difficulty=t.level,
        app=t.app,
        platform=t.platform,
        screen_width=t.screen_width,
        screen_height=t.screen_height,
        group="model",
        policy_version=tr.policy_version,
        group_id=group_id(round, t.task_id, tr.policy_version),
        attempt=tr.attempt,
        reference_answer=t.reference_answer,
        final_answer=tr.final_answer,
        outcome=tr.termination,
        env_reward=env_reward(tr),
        env_passed=tr.passed,
    )
