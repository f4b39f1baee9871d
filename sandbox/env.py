"""The environment API that policies, demonstrators and annotators all use.

    env = Env(task)                      # or Env(task, screenshots=True) to render a PNG with every observation
    obs = env.reset()                    # Observation(text, screenshot, step, width, height)
    r = env.step("click(point='<point>120 88</point>')")   # StepResult(observation, reward, done, info)
    v = env.verify()                     # schemas.records.Verdict(passed, reason, score, details)

An episode ends when the agent says finished(content=...), when the task reaches a terminal state (its goal,
or an irreversible wrong commit such as pressing the wrong button), at the task's step limit, or on an
unreadable or off-screen action. Rewards: +1 at the end of a passing episode, 0 for a failing one, -1 for an
unreadable or off-screen action (the UI-TARS-2 rule), 0 for every step before the end. `step` never raises
on bad input: the reason is in `info["error"]` and in `verify()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sandbox.goals import Goal
from sandbox.screen import Screen
from sandbox.tasks import Task, build
from schemas.actions import Action, ActionError, check_on_screen, parse_action
from schemas.records import Verdict


@dataclass(frozen=True)
class Observation:
    text: str  # the compact text form (docs/sandbox.md)
    step: int  # number of actions taken so far
    width: int
    height: int
    screenshot: bytes | None = None  # PNG, when the env renders screenshots


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Env:
    """One sandbox episode at a time for one task. Cheap to create; `reset()` rebuilds the screen from the seed."""

    def __init__(self, task: Task, screenshots: bool = False) -> None:
        self.task = task
        self.screenshots = screenshots
        self.reset()

    def reset(self) -> Observation:
        t = self.task
        b = build(t.family, t.level, t.seed, t.width, t.height)
        self.screen: Screen = b.screen
        self.goal: Goal = b.goal
        self.n_steps = 0
        self.done = False
        self.outcome: str | None = None
        self.answer: str | None = None
        self.last_action: Action | None = None
        self._fail: Verdict | None = None  # unreadable / off-screen / internal error
        self._obs = self._observe()
        return self._obs

    @property
    def max_steps(self) -> int:
        return self.task.max_steps or 50

    def observation(self) -> Observation:
        return self._obs

    def screenshot(self) -> bytes:
        from sandbox.render import render_png

        return render_png(self.screen)

    def _observe(self) -> Observation:
        s = self.screen
        png = self.screenshot() if self.screenshots else None
        return Observation(s.text(), self.n_steps, s.width, s.height, png)

    def _end(self, outcome: str, info: dict[str, Any], fail: Verdict | None = None) -> StepResult:
        self.done, self.outcome, self._fail = True, outcome, fail
        v = self.verify()
        reward = (
            -1.0 if fail is not None and fail.reason in ("unreadable_action", "off_screen_action") else float(v.passed)
        )
        info.update(outcome=outcome, passed=v.passed, reason=v.reason)
        self._obs = self._observe()
        return StepResult(self._obs, reward, True, info)

    def step(self, action: str) -> StepResult:
        """Apply one action string. Never raises on bad input; see the module docstring for rewards."""
        if self.done:
            return StepResult(
                self._obs, 0.0, True, {"error": "the episode is over; call reset()", "outcome": self.outcome}
            )
        self.n_steps += 1
        info: dict[str, Any] = {"step": self.n_steps, "error": None}
        try:
            a = parse_action(action)
        except ActionError as e:
            info["error"] = f"unreadable action: {e}"
            return self._end("unreadable_action", info, Verdict.fail("unreadable_action", -1.0, message=str(e)))
        try:
            check_on_screen(a, self.screen.width, self.screen.height)
        except ActionError as e:
            info["error"] = f"off-screen action: {e}"
            return self._end("unreadable_action", info, Verdict.fail("off_screen_action", -1.0, message=str(e)))
        self.last_action = a
        if a.kind == "finished":
            self.answer = a.text
            info["effect"] = "finished"
            return self._end("finished", info)
        try:
            info["effect"] = self.screen.act(a)
        except Exception as e:  # noqa: BLE001 - a bug in a screen must not kill a rollout worker
            info["error"] = f"internal error: {type(e).__name__}: {e}"
            return self._end("ended", info, Verdict.fail("env_error", message=info["error"]))
        if self.goal.terminal(self.screen):
            return self._end("ended", info)
        if self.n_steps >= self.max_steps:
            return self._end("step_limit", info)
        self._obs = self._observe()
        return StepResult(self._obs, 0.0, False, info)

    def verify(self) -> Verdict:
        """Pass or fail, with a reason code and a message, for the current (normally the final) state."""
        if self._fail is not None:
            return self._fail
        v = self.goal.verdict(self.screen, self.answer)
        if not v.passed and self.outcome == "step_limit":
            msg = (v.details or {}).get("message", v.reason)
            return Verdict.fail("step_limit", message=f"step limit {self.max_steps} reached; {msg}", state=v.reason)
        return v
