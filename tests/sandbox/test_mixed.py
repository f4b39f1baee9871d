"""Composed tasks (sandbox/mixed.py): two families' goals on one screen, each judged on its own turn, solvable, held
out by construction, and refused where the parts do not share a screen cleanly."""

from __future__ import annotations

import pytest

from sandbox.demonstrators import Expert
from sandbox.env import Env
from sandbox.families import FAMILIES
from sandbox.heldout import heldout_fingerprints, mixed_tasks, training_tasks
from sandbox.mixed import NotComposable
from sandbox.parallel import run_many
from sandbox.tasks import make_task, task_from_id
from schemas.actions import format_action

GROUPS = [["fill_form", "checkboxes"], ["menu_path", "scroll_find", "click_button"]]


def _first_composable(family: str, level: int = 1) -> Env:
    for seed in range(50):
        try:
            return Env(make_task(family, level, seed))
        except NotComposable:
            continue
    raise AssertionError(f"{family} L{level} never composed")


def _play(env: Env, goal, limit: int = 40) -> None:
    """Play `goal`'s expert moves (one part of a composed task) until the episode ends or that part is done."""
    mem: dict = {}
    for _ in range(limit):
        if env.done or goal.terminal(env.screen):
            return
        env.step(format_action(goal.hint(env.screen, mem).action()))


def test_composed_tasks_are_solved_by_the_expert_and_never_drawn_for_training() -> None:
    tasks = mixed_tasks(GROUPS, per_cell=1)
    fams = {t.family for t in tasks}
    want = {f"{a}+{b}" for i, ga in enumerate(GROUPS) for j, gb in enumerate(GROUPS) if i != j for a in ga for b in gb}
    assert fams == want  # every ordered pair composes at some level
    assert not fams & set(FAMILIES) and {t.level for t in tasks} >= {1, 2, 3, 4}
    assert [t.task_id for t in mixed_tasks(GROUPS, per_cell=1)] == [t.task_id for t in tasks]  # a fixed set
    assert not {t.fingerprint for t in tasks} & heldout_fingerprints()
    assert all(" Then " in t.instruction for t in tasks)
    atts = run_many(tasks, Expert)
    assert all(a.verdict.passed for a in atts), [
        (a.task.task_id, a.verdict.reason) for a in atts if not a.verdict.passed
    ]
    assert all("+" not in t.family for t in training_tasks(300, seed=3))
    assert all(task_from_id(t.task_id) == t for t in tasks[:5])


def test_each_part_is_judged_on_its_own_turn() -> None:
    env = _first_composable("click_button+fill_form")
    for _ in range(env.max_steps):
        if env.done:
            break
        env.step(format_action(Expert().move(env).action()))
    assert env.verify().passed
    # the button press of the first part is in the screen's events; the form, judged on all of them, would fail
    assert not env.goal.parts[1].verdict(env.screen, None).passed


def test_a_later_part_done_first_ends_the_episode_and_fails_the_waiting_part() -> None:
    env = _first_composable("menu_path+fill_form")
    _play(env, env.goal.parts[1])  # fill in and submit the form before running the menu command
    assert env.done and env.outcome == "ended"
    v = env.verify()
    assert not v.passed and v.reason == "not_done" and "was never run" in v.details["message"]


def test_a_wrong_commit_in_the_first_part_fails_at_once() -> None:
    env = _first_composable("click_button+fill_form")
    target = env.goal.parts[0].sequence[0]
    wrong = next(
        w for w in env.screen.content if w.role == "button" and w.enabled and w.key != target and w.effect == "press"
    )
    e = env.screen.element_of(wrong)
    env.step(f"click(point='<point>{e.cx} {e.cy}</point>')")
    assert env.done and env.verify().reason == "wrong_button"


@pytest.mark.parametrize(
    ("family", "level", "why"),
    [("click_button+fill_form", 3, "tabs"), ("popup+popup", 1, "more than one part"),
     ("answer+fill_form", 1, "question"), ("menu_path+menu_path", 1, "more than one part")],
)  # fmt: skip
def test_parts_that_do_not_share_a_screen_are_refused(family: str, level: int, why: str) -> None:
    with pytest.raises(NotComposable, match=why):
        make_task(family, level, 0)


def test_unknown_composed_families_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown task family"):
        make_task("fill_form+nope", 1, 0)
    assert task_from_id("fill_form+nope/L1/s0") is None
