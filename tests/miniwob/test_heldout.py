"""Held-out seeds: stored per task, never drawn for training, and still generating the stored utterances."""

from __future__ import annotations

from sandbox.miniwob import TASKS, heldout_specs, training_specs
from sandbox.miniwob.tasks import HELDOUT_PER_TASK, heldout_table


def test_every_task_has_heldout_seeds_and_training_never_draws_them() -> None:
    table = heldout_table()
    assert set(table) == set(TASKS) and all(len(rows) == HELDOUT_PER_TASK for rows in table.values())
    held = {(s.name, s.seed) for s in heldout_specs()}
    assert len(held) == len(TASKS) * HELDOUT_PER_TASK
    train = training_specs(3000, seed=1)
    assert not held & {(s.name, s.seed) for s in train}
    assert len({s.task_id for s in train}) == 3000


def test_stored_utterances_still_hold(pool) -> None:
    env = pool.env(1)
    for spec in heldout_specs(per_task=2):
        env.reset(spec)
        stored = next(r["utterance"] for r in heldout_table()[spec.name] if r["seed"] == spec.seed)
        assert env.utterance == stored, spec.task_id
