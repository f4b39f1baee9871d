"""The fixed held-out evaluation set: (family, level, seed) triples stored in sandbox/heldout_seeds.json.

The set spans every family and level. Training task generation (`sandbox.tasks.training_tasks`) skips these
seeds and any task whose content fingerprint equals a held-out one, so training never sees a held-out task
(tests/sandbox/test_heldout.py checks it). The stored fingerprints also pin the generators: if a code change
alters a held-out task, `heldout_tasks()` raises rather than silently evaluating a different set.

Regenerate (only when the generators change on purpose; eval rates before and after are not comparable):
    python -m sandbox.heldout --write
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from sandbox.families import FAMILIES, LEVELS
from sandbox.tasks import DEFAULT_HEIGHT, DEFAULT_WIDTH, Task, make_task

PATH = Path(__file__).with_name("heldout_seeds.json")
PER_CELL = 8  # seeds per (family, level)


@lru_cache(maxsize=1)
def _load() -> dict:
    return json.loads(PATH.read_text())


def heldout_keys() -> frozenset[tuple[str, int, int]]:
    return frozenset((e["family"], e["level"], e["seed"]) for e in _load()["tasks"])


def heldout_fingerprints() -> frozenset[str]:
    return frozenset(e["fingerprint"] for e in _load()["tasks"])


def heldout_tasks(
    per_cell: int | None = None, families: Sequence[str] | None = None, levels: Sequence[int] | None = None
) -> list[Task]:
    """The held-out tasks (optionally the first `per_cell` seeds of each family x level cell), in file order."""
    d = _load()
    taken: dict[tuple[str, int], int] = {}
    out = []
    for e in d["tasks"]:
        cell = (e["family"], e["level"])
        if families and e["family"] not in families or levels and e["level"] not in levels:
            continue
        if per_cell is not None and taken.get(cell, 0) >= per_cell:
            continue
        taken[cell] = taken.get(cell, 0) + 1
        t = make_task(e["family"], e["level"], e["seed"], d["width"], d["height"])
        if t.fingerprint != e["fingerprint"]:
            raise RuntimeError(f"held-out task {t.task_id} changed (generator drift); see sandbox/heldout.py")
        out.append(t)
    return out


def generate(per_cell: int = PER_CELL, width: int = 640, height: int = 400) -> dict:
    rng = random.Random("heldout/v1")
    tasks, fps = [], set()
    for fam in FAMILIES:
        for lvl in LEVELS:
            n = 0
            while n < per_cell:
                s = rng.randrange(2**31)
                t = make_task(fam, lvl, s, width, height)
                if t.fingerprint in fps:
                    continue
                fps.add(t.fingerprint)
                tasks.append({"family": fam, "level": lvl, "seed": s, "fingerprint": t.fingerprint})
                n += 1
    return {"version": 1, "width": width, "height": height, "tasks": tasks}


#: Seeds tried per (composed family, level) before the cell is left out: some parts never compose at a level (a
#: part with tabs), others only at some seeds (a widget name in both parts).
MIXED_TRIES = 12


def mixed_tasks(
    groups: Sequence[Sequence[str]],
    per_cell: int = 2,
    levels: Sequence[int] | None = None,
    width: int = 640,
    height: int = 400,
) -> list[Task]:
    """Held-out tasks that need two groups' skills in one episode: for every ordered pair of groups (a, b) and every
    family fa of a and fb of b, the composed family `fa+fb` (sandbox/mixed.py), `per_cell` tasks per level where it
    composes. Deterministic (seeds from a fixed generator per cell), and never a training task: composed families
    are not in FAMILIES, which training draws from."""
    from sandbox.mixed import NotComposable, composed

    out = []
    for i, ga in enumerate(groups):
        for j, gb in enumerate(groups):
            if i == j:
                continue
            for fa in ga:
                for fb in gb:
                    if fa == fb:
                        continue
                    fam = composed(fa, fb)
                    for lvl in levels or LEVELS:
                        rng, got = random.Random(f"mixed/v1/{fam}/{lvl}"), 0
                        for _ in range(MIXED_TRIES):
                            if got >= per_cell:
                                break
                            try:
                                out.append(make_task(fam, lvl, rng.randrange(2**31), width, height))
                                got += 1
                            except NotComposable:
                                continue
    return out


if __name__ == "__main__":
    if "--write" in sys.argv:
        PATH.write_text(json.dumps(generate(), indent=1) + "\n")
        print(f"wrote {PATH}")


def training_tasks(
    n: int,
    seed: int = 0,
    families: Sequence[str] | None = None,
    levels: Sequence[int] | None = None,
    width: int = DEFAULT_WIDTH,
    height: int = DEFAULT_HEIGHT,
) -> list[Task]:
    """n training tasks, cycling over families and levels, with seeds drawn from `seed`.

    Never returns a held-out task: neither a held-out (family, level, seed) nor a task whose content
    fingerprint equals a held-out one (two seeds can generate the same easy task).
    """
    fams = list(families or FAMILIES)
    lvls = list(levels or LEVELS)
    keys, fps = heldout_keys(), heldout_fingerprints()
    rng = random.Random(f"training/{seed}")
    out: list[Task] = []
    seen: set[str] = set()
    i = 0
    while len(out) < n:
        fam, lvl = fams[i % len(fams)], lvls[(i // len(fams)) % len(lvls)]
        i += 1
        s = rng.randrange(2**31)
        if (fam, lvl, s) in keys:
            continue
        t = make_task(fam, lvl, s, width, height)
        if t.fingerprint in fps or t.fingerprint in seen:
            continue
        seen.add(t.fingerprint)
        out.append(t)
    return out
