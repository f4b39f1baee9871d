"""Tasks: a family, a level and an integer seed, plus what they generate (instruction, reference answer, limits).

A Task is a small frozen record; the screen and goal behind it are rebuilt from (family, level, seed, size) by
the family's builder whenever an environment resets, so a task can be stored, sent to another process or
written to JSON as just its fields. `make_task` also plays the expert once to learn the optimal path length,
which sets the step limit, and hashes the initial screen and goal into a fingerprint that the held-out check
compares.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sandbox.families import FAMILIES, LEVELS, Built

DEFAULT_WIDTH, DEFAULT_HEIGHT = 640, 400


@dataclass(frozen=True)
class Task:
    task_id: str
    family: str
    level: int
    seed: int
    instruction: str
    reference_answer: str | None = None
    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    optimal_steps: int = 0  # the expert's path length
    max_steps: int = 0  # the step limit: 2 x optimal + 3
    fingerprint: str = ""  # hash of instruction, goal and initial screen (content identity, seed-independent)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(**d)


def task_id(family: str, level: int, seed: int, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT) -> str:
    size = "" if (width, height) == (DEFAULT_WIDTH, DEFAULT_HEIGHT) else f"@{width}x{height}"
    return f"{family}/L{level}/s{seed}{size}"


_TASK_ID = re.compile(r"^(?P<family>[a-z_+]+)/L(?P<level>\d+)/s(?P<seed>\d+)(?:@(?P<w>\d+)x(?P<h>\d+))?$")


def task_from_id(tid: str) -> Task | None:
    """The sandbox task a task id names (`family/L<level>/s<seed>[@WxH]`, as `task_id` writes it), rebuilt from
    its seed; None when the id is not a sandbox task's (another environment's, or an unknown family)."""
    m = _TASK_ID.match(tid or "")
    if not m or not _known(m["family"]) or int(m["level"]) not in LEVELS:
        return None
    size = (int(m["w"]), int(m["h"])) if m["w"] else (DEFAULT_WIDTH, DEFAULT_HEIGHT)
    return make_task(m["family"], int(m["level"]), int(m["seed"]), *size)


def _known(family: str) -> bool:
    from sandbox.mixed import parts_of

    return family in FAMILIES or parts_of(family) is not None


def build(family: str, level: int, seed: int, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT) -> Built:
    """The screen, goal and instruction of a task (fresh objects every call). A composed family (`a+b`,
    sandbox/mixed.py) raises sandbox.mixed.NotComposable where its parts do not share a screen cleanly."""
    if not _known(family):
        raise ValueError(f"unknown task family {family!r}; expected one of {', '.join(FAMILIES)} (or a+b)")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if width < 320 or height < 240:
        raise ValueError(f"screen {width}x{height} is too small (minimum 320x240)")
    if family not in FAMILIES:
        from sandbox.mixed import build_composed

        return build_composed(family, level, seed, width, height)
    return FAMILIES[family](random.Random(f"{family}/{level}/{seed}"), level, width, height)


def _expert_length(b: Built) -> int:
    screen, goal, memory = b.screen, b.goal, {}  # type: ignore[var-annotated]
    for n in range(1, 200):
        m = goal.hint(screen, memory)
        if m.kind == "finished":
            return n
        screen.act(m.action())
        if goal.terminal(screen):
            return n
    raise RuntimeError("expert did not finish within 200 steps")


def make_task(family: str, level: int, seed: int, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT) -> Task:
    b = build(family, level, seed, width, height)
    h = hashlib.sha256()
    for part in (family, str(level), b.instruction, b.goal.describe(), b.screen.text()):
        h.update(part.encode())
        h.update(b"\x1f")
    fp = h.hexdigest()[:24]
    n = _expert_length(b)
    return Task(
        task_id=task_id(family, level, seed, width, height), family=family, level=level, seed=seed,
        instruction=b.instruction, reference_answer=b.reference_answer, width=width, height=height,
        optimal_steps=n, max_steps=2 * n + 3, fingerprint=fp,
    )  # fmt: skip


def tasks_for(
    pairs: Iterable[tuple[str, int, int]], width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> list[Task]:
    return [make_task(f, lv, s, width, height) for f, lv, s in pairs]
