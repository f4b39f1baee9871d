"""Held-out MiniWoB++ seeds: write them (with the utterance each one generates) or check that they still hold.

    python -m sandbox.miniwob.heldout --write     # regenerate heldout_seeds.json (needs Chromium)
    python -m sandbox.miniwob.heldout --check     # every stored seed still generates its stored utterance

The seeds are fixed per task (drawn from a named RNG in a range training never draws from twice: see
tasks.training_specs, which skips them). Storing the utterance makes a change of the task pages (a miniwob
upgrade) visible: evaluation rates before and after such a change are not comparable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from sandbox.miniwob.tasks import HELDOUT_PATH, HELDOUT_PER_TASK, TASKS, TaskSpec, _heldout_seed_list, heldout_table


def generate(names: Sequence[str] | None = None, per_task: int = HELDOUT_PER_TASK) -> dict[str, list[dict]]:
    from sandbox.miniwob.env import MiniwobEnv

    out: dict[str, list[dict]] = {}
    names = list(names or TASKS)
    env = MiniwobEnv(TaskSpec(names[0], 0), screenshots=False, reset=False)
    try:
        for name in names:
            rows = []
            for seed in _heldout_seed_list(name, per_task):
                env.reset(TaskSpec(name, seed))
                rows.append({"seed": seed, "utterance": env.utterance})
            out[name] = rows
    finally:
        env.close()
    return out


def check(names: Sequence[str] | None = None, per_task: int | None = None) -> list[str]:
    """Mismatches between the stored utterances and what the pages generate now (empty when all hold)."""
    from sandbox.miniwob.env import MiniwobEnv

    table = heldout_table()
    names = list(names or table)
    bad = []
    env = MiniwobEnv(TaskSpec(names[0], 0), screenshots=False, reset=False)
    try:
        for name in names:
            for r in table[name][:per_task]:
                env.reset(TaskSpec(name, r["seed"]))
                if env.utterance != r["utterance"]:
                    bad.append(f"{name} seed {r['seed']}: stored {r['utterance']!r}, now {env.utterance!r}")
    finally:
        env.close()
    return bad


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    if args.write:
        import miniwob

        tasks = generate()
        HELDOUT_PATH.write_text(
            json.dumps({"miniwob": miniwob.__version__, "per_task": HELDOUT_PER_TASK, "tasks": tasks}, indent=1) + "\n"
        )
        print(f"wrote {sum(map(len, tasks.values()))} held-out seeds for {len(tasks)} tasks to {HELDOUT_PATH}")
    if args.check:
        bad = check()
        for b in bad:
            print(b)
        print("ok" if not bad else f"{len(bad)} held-out seeds changed")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
