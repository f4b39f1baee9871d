"""Run a policy on a task and keep what happened: an Attempt (steps with thoughts, times, observations,
optional screenshots, the verdict), convertible to a schemas.records.Episode.

Times are simulated, not measured: a thought takes as long as it takes to say (about 2.5 words a second),
the hand follows after a short reaction delay, and actions take their own time (typing is per character).
The novice is slower than the expert (`pace`). This gives the think-aloud and annotation exports realistic
timelines without sleeping.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sandbox.demonstrators import Decision
from sandbox.env import Env
from sandbox.tasks import Task
from schemas.actions import ActionError, parse_action
from schemas.records import Episode, Step, Verdict


class Policy(Protocol):
    name: str

    def reset(self, task: Task, attempt: int = 0) -> None: ...

    def act(self, env: Env) -> Decision: ...


@dataclass(frozen=True)
class AttemptStep:
    thought: str
    action: str
    observation: str  # the text observation the policy saw before acting
    effect: str  # what the action did, in words (or the error)
    reward: float
    t_start: float  # thought starts (seconds from the attempt start)
    t_action: float  # the action starts
    t_end: float  # the action ends
    screenshot: bytes | None = None  # PNG of the screen before the action
    mistake: str | None = None
    fatal: bool = False
    recovers: str | None = None
    expert_thought: str | None = None
    expert_action: str | None = None
    proposal: tuple[str, str] | None = None  # interactive annotation: the model's (thought, action)
    decision: str | None = None  # accepted | overridden


@dataclass(frozen=True)
class Attempt:
    task: Task
    policy: str  # expert | novice | a model name
    attempt: int
    steps: tuple[AttemptStep, ...]
    verdict: Verdict
    outcome: str  # finished | ended | step_limit | unreadable_action
    reward: float  # the final step's reward (+1 pass, 0 fail, -1 unreadable)
    final_answer: str | None
    final_screenshot: bytes | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict.passed


def _action_s(action: str) -> float:
    try:
        a = parse_action(action)
    except ActionError:
        return 0.3
    if a.kind == "type":
        return 0.15 * len(a.text or "") + 0.2
    return {"click": 0.25, "scroll": 0.4, "hotkey": 0.3, "finished": 0.1}.get(a.kind, 0.3)


def step_times(
    rng: random.Random, t: float, thought: str, action: str, pace: float = 1.0
) -> tuple[float, float, float, float]:
    """Simulated (thought start, action start, action end, next step's start) of one step starting at `t`: saying
    the thought at ~2.5 words a second, a short reaction delay, the action's own duration, a pause."""
    speak = pace * (len(thought.split()) / 2.5) if thought else 0.0
    t_action = t + speak + pace * rng.uniform(0.3, 0.9)
    t_end = t_action + pace * _action_s(action)
    return t, t_action, t_end, t_end + pace * rng.uniform(0.2, 0.6)


def run_attempt(task: Task, policy: Policy, attempt: int = 0, screenshots: bool = False) -> Attempt:
    """Reset the policy and a fresh Env, step until done, and return the Attempt with the env's verdict."""
    env = Env(task, screenshots=screenshots)
    policy.reset(task, attempt)
    rng = random.Random(f"timing/{task.task_id}/{policy.name}/{attempt}")
    pace = float(getattr(policy, "pace", 1.0))
    steps: list[AttemptStep] = []
    t = 0.5
    reward = 0.0
    while not env.done:
        obs = env.observation()
        d = policy.act(env)
        _, t_action, t_end, t_next = step_times(rng, t, d.thought, d.action, pace)
        r = env.step(d.action)
        reward = r.reward
        steps.append(
            AttemptStep(
                thought=d.thought,
                action=d.action,
                observation=obs.text,
                effect=r.info.get("error") or r.info.get("effect", ""),
                reward=r.reward,
                t_start=round(t, 3),
                t_action=round(t_action, 3),
                t_end=round(t_end, 3),
                screenshot=obs.screenshot,
                mistake=d.mistake,
                fatal=d.fatal,
                recovers=d.recovers,
                expert_thought=d.expert_thought,
                expert_action=d.expert_action,
                proposal=d.proposal,
                decision=d.decision,
            )  # fmt: skip
        )
        t = t_next
    return Attempt(
        task=task, policy=policy.name, attempt=attempt, steps=tuple(steps), verdict=env.verify(),
        outcome=env.outcome or "unknown", reward=reward, final_answer=env.answer,
        final_screenshot=env.observation().screenshot,
    )  # fmt: skip


def run_until_pass(task: Task, policy: Policy, max_attempts: int = 3, screenshots: bool = False) -> list[Attempt]:
    """Retry a task until an attempt passes (the way a person retries), at most max_attempts times."""
    out: list[Attempt] = []
    for k in range(max_attempts):
        out.append(run_attempt(task, policy, k, screenshots))
        if out[-1].passed:
            break
    return out


def to_episode(
    a: Attempt,
    source: str,
    session_id: str,
    round: int = 0,
    screenshot_ref: Callable[[bytes], tuple[str, str]] | None = None,
    **overrides: Any,
) -> Episode:
    """The attempt as a flywheel Episode. `screenshot_ref(png) -> (uri, sha256)` stores screenshots (the
    caller's object store); without it, steps carry no screenshot reference."""
    t = a.task
    steps = []
    for i, s in enumerate(a.steps):
        uri = sha = None
        if screenshot_ref is not None and s.screenshot is not None:
            uri, sha = screenshot_ref(s.screenshot)
        steps.append(
            Step(
                index=i,
                action=s.action,
                thought=s.thought,
                raw_thought=s.thought,
                t_start=s.t_start,
                t_end=s.t_end,
                observation=s.observation,
                screenshot_uri=uri,
                screenshot_sha256=sha,
                reward=s.reward,
            )  # fmt: skip
        )
    kw: dict[str, Any] = dict(
        session_id=session_id, source=source, task_id=t.task_id, instruction=t.instruction, steps=tuple(steps),
        round=round, task_family=t.family, difficulty=t.level, app="flywheel-sandbox", platform="sandbox",
        screen_width=t.width, screen_height=t.height, group=a.policy if a.policy in ("expert", "novice") else "model",
        attempt=a.attempt, reference_answer=t.reference_answer, final_answer=a.final_answer, outcome=a.outcome,
        env_reward=a.reward, env_passed=a.passed,
        meta={"verdict_reason": a.verdict.reason, "seed": t.seed, "level": t.level, "policy": a.policy},
    )  # fmt: skip
    kw.update(overrides)
    return Episode(**kw)
