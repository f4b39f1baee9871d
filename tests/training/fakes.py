"""A stand-in GUI environment for the training tests: small, fast, verifiable, with an expert demonstrator.

It implements training.rollout.Environment directly (text observation, action-grammar strings, a verifier), so the
tests exercise the real training code without depending on the sandbox's task catalogue or speed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from schemas.actions import ActionError, parse_action
from schemas.records import Episode, Step
from training.rollout import TaskInfo

NAMES = ["Save", "Open", "Close", "Print", "Help", "Edit", "View", "Send"]


@dataclass
class Button:
    name: str
    x: int
    y: int
    w: int = 40
    h: int = 20

    def hit(self, px: int, py: int) -> bool:
        return self.x - self.w // 2 <= px < self.x + self.w // 2 and self.y - self.h // 2 <= py < self.y + self.h // 2


class ButtonEnv:
    """Click the named buttons in order; a wrong click ends the attempt as a failure."""

    def __init__(self, seed: int, n_targets: int = 1) -> None:
        rng = random.Random(seed)
        names = rng.sample(NAMES, 4)
        self.buttons = [Button(n, rng.randrange(30, 290, 10), rng.randrange(20, 220, 10)) for n in names]
        self.targets = names[:n_targets]
        self.done_n = 0
        self.failed = False

    def observation(self) -> str:
        lines = ['window "App" 320x240'] + [f'button "{b.name}" at ({b.x}, {b.y})' for b in self.buttons]
        return "\n".join(lines + [f"clicked {self.done_n}"])

    def reset(self) -> str:
        self.done_n, self.failed = 0, False
        return self.observation()

    def step(self, action: str) -> tuple[str, bool, str | None]:
        try:
            a = parse_action(action)
        except ActionError:
            self.failed = True
            return self.observation(), True, "unreadable_action"
        target = next(b for b in self.buttons if b.name == self.targets[self.done_n])
        if a.kind == "click" and target.hit(a.x, a.y):
            self.done_n += 1
            done = self.done_n == len(self.targets)
            return self.observation(), done, "finished" if done else None
        self.failed = True
        return self.observation(), True, "finished"

    def verify(self) -> tuple[bool, str]:
        if self.failed:
            return False, "wrong_click"
        return (self.done_n == len(self.targets), "ok" if self.done_n == len(self.targets) else "unfinished")

    def expert(self) -> list[tuple[str, str]]:
        out = []
        for t in self.targets:
            b = next(b for b in self.buttons if b.name == t)
            out.append((f"I click {t}.", f"click(point='<point>{b.x} {b.y}</point>')"))
        return out


def task(seed: int, n_targets: int = 1) -> TaskInfo:
    env = ButtonEnv(seed, n_targets)
    return TaskInfo(
        task_id=f"buttons-{n_targets}-{seed}",
        instruction="Click " + ", then ".join(env.targets),
        family="buttons",
        level=n_targets,
        step_limit=n_targets + 1,
        make_env=lambda: ButtonEnv(seed, n_targets),
        screen_width=320,
        screen_height=240,
    )


def tasks(n: int, seed: int, n_targets: int = 1) -> list[TaskInfo]:
    return [task(seed * 10_000 + i, n_targets) for i in range(n)]


def expert_episode(seed: int, n_targets: int = 1, round: int = 0) -> Episode:
    t = task(seed, n_targets)
    env = t.make_env()
    obs = env.reset()
    steps = []
    for i, (thought, action) in enumerate(env.expert()):  # type: ignore[attr-defined]
        steps.append(Step(index=i, action=action, thought=thought, observation=obs))
        obs, _, _ = env.step(action)
    return Episode(
        session_id=f"fake-{seed}",
        source="rollout",
        task_id=t.task_id,
        instruction=t.instruction,
        steps=tuple(steps),
        round=round,
        task_family=t.family,
        difficulty=t.level,
        group="expert",
        env_passed=True,
        outcome="finished",
    )


def corpus(n: int = 200) -> list[str]:
    """Text for the tokenizer: observations, instructions, thoughts and actions of expert episodes."""
    out = []
    for s in range(n):
        e = expert_episode(s, 1 + s % 2)
        out.append(e.instruction)
        out += [f"Observation:\n{st.observation}\nThought: {st.thought}\nAction: {st.action}" for st in e.steps]
    return out
