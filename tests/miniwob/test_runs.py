"""The round-level functions the flywheel demo calls: cold-start demos, describe, rollouts and evaluation."""

from __future__ import annotations

import re

from sandbox.miniwob import PolicyStep, TaskSpec, demonstrations, describe, evaluate, heldout_specs, per_step, rollouts


def _click_named(step: PolicyStep) -> str:
    """Reads the text observation only: click the element whose name the instruction quotes, else a corner."""
    m = re.search(r'"([^"]+)"', step.task.instruction)
    line = m and re.search(rf'^\w+ "{re.escape(m.group(1))}" \((\d+),(\d+)\)$', step.observation, re.M)
    x, y = line.groups() if line else ("1", "1")
    return f"click(point='<point>{x} {y}</point>')"


def test_evaluate_reports_per_task_success_of_a_text_policy(pool) -> None:
    res = evaluate(
        pool, per_step(_click_named), ["click-button", "click-link", "enter-text"], per_task=4, progress=False
    )
    assert res.per_task == {"click-button": (4, 4), "click-link": (4, 4), "enter-text": (0, 4)}
    assert abs(res.rate - 8 / 12) < 1e-9 and [a.task.task_id for a in res.attempts] == [
        s.task_id for s in heldout_specs(["click-button", "click-link", "enter-text"], 4)
    ]


def test_demonstrations_and_rollouts_come_back_as_attempts(pool) -> None:
    demos = demonstrations(pool, ["click-tab", "enter-text"], per_task=2, progress=False)
    assert len(demos) == 4 and {a.policy for a in demos} == {"expert", "novice"}
    assert all(a.steps and a.steps[0].thought for a in demos)
    specs = [TaskSpec("click-link", 40), TaskSpec("click-link", 41)]
    tasks = describe(pool, specs + heldout_specs(["click-link"], 1))
    assert all(t.instruction.startswith("Click on the link") for t in tasks)
    atts = rollouts(pool, specs, per_step(_click_named), attempts=2, progress=False)
    assert [a.task.instruction for a in atts[::2]] == [
        t.instruction for t in tasks[:2]
    ]  # describe() saw the same episode
    assert all(a.passed for a in atts)
