"""The held-out set spans every family and level, is stable, and training never produces one of its tasks."""

from __future__ import annotations

from sandbox.families import FAMILIES, LEVELS
from sandbox.heldout import heldout_fingerprints, heldout_keys, heldout_tasks, training_tasks


def test_heldout_spans_every_family_and_level_and_is_stable() -> None:
    tasks = heldout_tasks()  # raises on generator drift (fingerprint mismatch)
    cells = {(t.family, t.level) for t in tasks}
    assert cells == {(f, lvl) for f in FAMILIES for lvl in LEVELS}
    assert len({t.fingerprint for t in tasks}) == len(tasks)
    assert len(heldout_tasks(per_cell=2)) == 2 * len(cells)


def test_training_tasks_never_collide_with_heldout() -> None:
    keys, fps = heldout_keys(), heldout_fingerprints()
    tasks = training_tasks(2100, seed=0) + training_tasks(700, seed=1, levels=[1])
    assert len({t.fingerprint for t in tasks[:2100]}) == 2100
    for t in tasks:
        assert (t.family, t.level, t.seed) not in keys
        assert t.fingerprint not in fps
    assert {t.family for t in tasks} == set(FAMILIES) and {t.level for t in tasks} == set(LEVELS)


def test_training_generation_skips_a_heldout_seed_it_draws() -> None:
    """Force a collision: with the held-out seeds injected into the draw, none comes out."""
    import random

    from sandbox import heldout as T

    k = sorted(heldout_keys())[0]
    orig = random.Random.randrange
    calls = {"n": 0}

    def rigged(self: random.Random, *a: int) -> int:  # the first draw is a held-out seed
        calls["n"] += 1
        return k[2] if calls["n"] == 1 else orig(self, *a)

    random.Random.randrange = rigged  # type: ignore[method-assign]
    try:
        out = T.training_tasks(1, families=[k[0]], levels=[k[1]])
    finally:
        random.Random.randrange = orig  # type: ignore[method-assign]
    assert out[0].seed != k[2] and out[0].fingerprint not in heldout_fingerprints()
