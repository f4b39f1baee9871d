"""MiniWoB++ tasks as the flywheel sees them: a task name and an integer seed (the page's Math.seedrandom).

The instruction (MiniWoB's utterance) is only known once the page has generated the episode, so a task is a
`TaskSpec(name, seed)` until then; `to_task(spec, utterance)` turns it into the sandbox's Task record (the
type Attempt, to_episode and the exporters take): task_id ``miniwob/<name>/s<seed>``, family = the task name,
level 1, the task area's size, the step limit of the task, and a fingerprint of (name, utterance).

Held-out seeds are fixed per task in heldout_seeds.json (with the utterance each one generated, checked when
the evaluation runs, so a miniwob upgrade that changes the pages is noticed). `training_specs` never returns a
held-out seed. Note: small tasks have few distinct utterances (click-button: about 16), so a held-out episode
can share its utterance with training ones; the layout (positions, distractors) still differs.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sandbox.tasks import Task

TASK_WIDTH, TASK_HEIGHT = 160, 210

#: The tasks with a scripted demonstrator, and each one's step limit (2 x the longest expert path + 3).
TASKS: dict[str, int] = {
    "click-button": 5,
    "click-link": 5,
    "click-dialog": 5,
    "click-tab": 5,
    "focus-text": 5,
    "click-option": 7,
    "enter-text": 9,
    "enter-password": 13,
    "login-user": 13,
    "choose-list": 9,
    "use-autocomplete": 13,
    "click-checkboxes": 17,
}

HELDOUT_PATH = Path(__file__).with_name("heldout_seeds.json")
HELDOUT_PER_TASK = 30


@dataclass(frozen=True)
class TaskSpec:
    name: str
    seed: int

    @property
    def task_id(self) -> str:
        return f"miniwob/{self.name}/s{self.seed}"

    @property
    def max_steps(self) -> int:
        return TASKS.get(self.name, 15)


def to_task(spec: TaskSpec, utterance: str, scale: int = 1) -> Task:
    fp = hashlib.sha256(f"miniwob\x1f{spec.name}\x1f{utterance}".encode()).hexdigest()[:24]
    return Task(
        task_id=spec.task_id, family=spec.name, level=1, seed=spec.seed, instruction=utterance,
        width=TASK_WIDTH * scale, height=TASK_HEIGHT * scale, optimal_steps=0, max_steps=spec.max_steps,
        fingerprint=fp,
    )  # fmt: skip


def check_names(names: Sequence[str]) -> list[str]:
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise ValueError(f"unknown MiniWoB++ task(s) {', '.join(unknown)}; supported: {', '.join(TASKS)}")
    return list(names)


def _heldout_seed_list(name: str, n: int = HELDOUT_PER_TASK) -> list[int]:
    return sorted(random.Random(f"miniwob-heldout/{name}").sample(range(1_000_000, 2_000_000), n))


@lru_cache(maxsize=1)
def heldout_table() -> dict[str, list[dict]]:
    """{task: [{"seed", "utterance"}, ...]} from heldout_seeds.json."""
    if not HELDOUT_PATH.exists():
        raise FileNotFoundError(f"{HELDOUT_PATH} is missing; write it with `python -m sandbox.miniwob.heldout --write`")
    return json.loads(HELDOUT_PATH.read_text())["tasks"]


def heldout_specs(names: Sequence[str] | None = None, per_task: int | None = None) -> list[TaskSpec]:
    table = heldout_table()
    out = []
    for name in check_names(list(names or TASKS)):
        rows = table.get(name)
        if rows is None:
            raise ValueError(f"no held-out seeds for {name}; run `python -m sandbox.miniwob.heldout --write`")
        out += [TaskSpec(name, r["seed"]) for r in rows[:per_task]]
    return out


def heldout_utterance(spec: TaskSpec) -> str | None:
    for r in heldout_table().get(spec.name, []):
        if r["seed"] == spec.seed:
            return r["utterance"]
    return None


def training_specs(n: int, seed: int = 0, names: Sequence[str] | None = None) -> list[TaskSpec]:
    """n training tasks cycling over the task names; seeds drawn from `seed`, never a held-out one."""
    names = check_names(list(names or TASKS))
    held = {(name, r["seed"]) for name, rows in heldout_table().items() for r in rows}
    rng = random.Random(f"miniwob-training/{seed}")
    out: list[TaskSpec] = []
    seen: set[tuple[str, int]] = set()
    i = 0
    while len(out) < n:
        name = names[i % len(names)]
        s = rng.randrange(2**31)
        i += 1
        if (name, s) in held or (name, s) in seen:
            continue
        seen.add((name, s))
        out.append(TaskSpec(name, s))
    return out
