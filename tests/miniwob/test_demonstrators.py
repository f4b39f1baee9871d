"""Scripted demonstrators on held-out seeds of every supported task, with natural thoughts."""

from __future__ import annotations

import collections

import pytest

from sandbox.miniwob import TASKS, Expert, Novice, heldout_specs


@pytest.mark.slow
def test_expert_solves_every_task_on_heldout_seeds(pool) -> None:
    attempts = pool.run(heldout_specs(per_task=4), Expert, progress=False)
    by = collections.Counter(a.task.family for a in attempts if a.passed)
    assert by == dict.fromkeys(TASKS, 4), [(a.task.task_id, a.verdict) for a in attempts if not a.passed]
    for a in attempts:
        assert all(len(s.thought.split()) >= 3 for s in a.steps)
        assert len({s.thought for s in a.steps}) == len(a.steps) or a.task.family == "use-autocomplete"
        assert a.steps[-1].t_end > a.steps[0].t_start


def test_novice_fails_some_and_says_the_wrong_name(pool) -> None:
    attempts = pool.run(
        heldout_specs(["click-button", "click-link"], per_task=5), lambda: Novice(p_mistake=1.0), progress=False
    )
    assert not any(a.passed for a in attempts)
    for a in attempts:
        s = a.steps[-1]
        assert s.mistake == "lookalike" and s.fatal and s.action != s.expert_action
        assert a.verdict.reason == "task_failed" and a.meta["raw_reward"] == -1.0
