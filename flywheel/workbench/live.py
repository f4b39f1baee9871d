"""The remote screen: environments run on the server; the page sends a person's input, gets the next screen.

The page turns clicks, double clicks, right clicks, drags, wheel turns and keys into the parts of one action
(kind, point, keys, text); `to_action` builds a `schemas.actions.Action` from them, which validates it, and
formats it with the grammar, so what the person did is stored exactly as a model's action would be. Each live
session keeps every step (screen, observation, proposals, decision) until it is finished and landed.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sandbox.env import Env
from sandbox.tasks import Task
from schemas.actions import Action, ActionError, format_action
from schemas.prompt import Turn

#: The fields of an action that a page may send (the rest of the Action is filled by its defaults).
INPUT_FIELDS = ("kind", "x", "y", "x2", "y2", "text", "key", "direction")


def to_action(data: dict[str, Any]) -> str:
    """The page's input parts -> an action string of the grammar; ActionError says what is wrong."""
    if not isinstance(data, dict):
        raise ActionError("an action is an object with a kind")
    unknown = set(data) - set(INPUT_FIELDS)
    if unknown:
        raise ActionError(f"unknown action field(s): {', '.join(sorted(unknown))}")
    try:
        return format_action(Action(**{k: data[k] for k in INPUT_FIELDS if data.get(k) is not None}))
    except TypeError as e:
        raise ActionError(str(e)) from None


@dataclass
class LiveStep:
    """One executed step and what the person saw before it."""

    observation: str
    screenshot: bytes
    thought: str
    action: str
    t_start: float
    t_end: float
    proposals: list[Any] = field(default_factory=list)  # proposals.Proposed
    decision: str | None = None  # accepted | overridden (interactive annotation)
    accepted_index: int | None = None
    t_client: float | None = None  # think-aloud: when the page sent the action, on the recording's clock


@dataclass
class LiveSession:
    """One person's environment on the server. `mode` is annotate (proposals at every step) or think-aloud."""

    session_id: str
    owner: str
    assignment_id: str | None
    task: Task
    mode: str
    env: Env
    started: float = field(default_factory=time.monotonic)
    steps: list[LiveStep] = field(default_factory=list)
    proposals: list[Any] = field(default_factory=list)  # for the current step
    last_t: float = 0.0
    error: str | None = None  # the last action's problem (off-screen, ...)
    landed: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)  # think-aloud: the page's recorded input events
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def done(self) -> bool:
        return self.env.done

    def clock(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def history(self) -> list[Turn]:
        return [Turn(s.observation, s.thought, s.action) for s in self.steps]

    def screenshot(self) -> bytes:
        return self.env.observation().screenshot or self.env.screenshot()

    def act(self, action: str, thought: str = "", **decision: Any) -> LiveStep:
        """Run one action (already in the grammar) and record the step it makes."""
        obs = self.env.observation()
        t_end = self.clock()
        step = LiveStep(obs.text, self.screenshot(), thought, action, self.last_t, t_end, list(self.proposals),
                        **decision)  # fmt: skip
        r = self.env.step(action)
        self.error = r.info.get("error")
        self.steps.append(step)
        self.last_t, self.proposals = t_end, []
        return step


class LiveSessions:
    """The live sessions of this server process, by id."""

    def __init__(self) -> None:
        self._by_id: dict[str, LiveSession] = {}
        self._lock = threading.Lock()

    def start(self, owner: str, task: Task, mode: str, assignment_id: str | None = None) -> LiveSession:
        from sandbox.export import session_id

        sid = session_id("wb", owner, task.task_id, secrets.token_hex(4))
        s = LiveSession(sid, owner, assignment_id, task, mode, Env(task, screenshots=True))
        with self._lock:
            self._by_id[sid] = s
        return s

    def get(self, session_id: str) -> LiveSession | None:
        with self._lock:
            return self._by_id.get(session_id)

    def all(self) -> list[LiveSession]:
        with self._lock:
            return list(self._by_id.values())
