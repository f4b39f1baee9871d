"""Interactive annotation with the newest checkpoint (training/annotate.py): the model proposes, the scripted
annotator accepts or overrides, and the session lands through the annotation reader."""

from __future__ import annotations

import json

from sandbox.demonstrators import Expert, same_move
from sandbox.env import Env
from sandbox.heldout import training_tasks
from schemas.actions import Action, format_action, parse_action
from training.annotate import annotate_round
from training.envs import SandboxBackend, SandboxEnv, task_info


def _first_click_task():
    """A training task whose first expert move is a click on an element wider than a few pixels."""
    for t in training_tasks(40, seed=5):
        env = Env(t)
        env.reset()
        ex = Expert()
        ex.reset(t)
        a = parse_action(ex.act(env).action)
        if a.kind == "click":
            e = env.screen.hit(a.x, a.y)
            if e is not None and e.w >= 10:
                return t, env, a, e
    raise AssertionError("no click task among 40")


def test_same_move_is_the_same_element_text_and_keys() -> None:
    t, env, a, e = _first_click_task()
    wanted = format_action(a)
    assert same_move(env.screen, _off_centre(a, e), wanted)  # anywhere on the element the annotator would click
    elsewhere = next(
        o for o in env.screen.elements() if o.name != e.name and o.kind not in ("dialog", "dialogtext", "list")
    )
    assert not same_move(env.screen, format_action(Action("click", x=elsewhere.cx, y=elsewhere.cy)), wanted)
    assert not same_move(env.screen, "type(content='a')", "type(content='b')")
    assert same_move(env.screen, "type(content='b')", "type(content='b')")
    assert not same_move(env.screen, "not an action", wanted)


def _off_centre(a: Action, e) -> str:
    """A click on another pixel of the same element."""
    return format_action(Action("click", x=e.x + 1 if e.x + 1 != a.x else e.x + 2, y=a.y))


def test_reviewer_accepts_the_right_move_and_overrides_the_wrong_one() -> None:
    t, _, a, e = _first_click_task()
    backend = SandboxBackend()
    info = task_info(t)
    env = SandboxEnv(t)
    env.reset()
    assert backend.reviewer(info).review(env, "my thought", _off_centre(a, e)) is None
    over = backend.reviewer(info).review(env, "my thought", "scroll(direction='down')")
    assert over is not None and over[1] == format_action(a) and over[0]
    assert backend.reviewer(info).review(env, "", "") is not None  # an unreadable proposal is overridden


def test_annotation_round_lands_a_session_with_proposals_and_decisions(lake, tiny_policy, tmp_path) -> None:
    tiny_policy.version = "ckpt-ia"
    backend = SandboxBackend()
    tasks = backend.training_tasks(6, seed=3)
    res = annotate_round(
        lake, 2, tiny_policy, tasks, tmp_path, backend.reviewer, backend.render_steps, max_new_tokens=16
    )
    # the untrained model's proposals are overridden, so every episode is the annotator's and passes
    assert res.episodes == 6 and res.episodes_added == 6 and res.passed == 6
    assert res.steps >= 6 and 0 <= res.accepted < res.steps
    eps = lake.read("episodes").to_pylist()
    assert {e["source"] for e in eps} == {"interactive"} and {e["round"] for e in eps} == {2}
    steps = [s for e in eps for s in e["steps"]]
    assert len(steps) == res.steps
    assert sum(s["decision"] == "accepted" for s in steps) == res.accepted
    assert all(s["proposals"] and s["proposals"][0]["model_version"] == "ckpt-ia" for s in steps)
    assert all(s["screenshot_uri"] and s["observation"] for s in steps)
    over = [s for s in steps if s["decision"] == "overridden"]
    assert over and all(s["action"] != s["proposals"][0]["action"] for s in over)
    session = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert session["episodes"][0]["steps"][0]["proposals"][0]["model_version"] == "ckpt-ia"
    again = annotate_round(
        lake, 2, tiny_policy, tasks, tmp_path, backend.reviewer, backend.render_steps, max_new_tokens=16
    )
    assert again.episodes_added == 0 and lake.count("episodes") == 6  # the same session again adds nothing


def test_screenshots_rendered_in_threads_are_the_serial_ones_in_order(lake, tiny_policy) -> None:
    from training.rollout import run_episodes
    from training.sampling import attach_screenshots

    backend = SandboxBackend()
    assert backend.render_threads >= 1
    tasks = backend.training_tasks(6, seed=3)
    trajs = run_episodes(tiny_policy.model, tiny_policy.tokenizer, tasks, temperature=0.0, max_new_tokens=16,
                         reviewer=backend.reviewer)  # fmt: skip
    serial = attach_screenshots(lake, trajs, backend.render_steps)
    threaded = attach_screenshots(lake, trajs, backend.render_steps, threads=3)
    assert threaded == serial  # the same screens, each trajectory's in its place
    assert [len(r) for r in serial] == [len(t.steps) for t in trajs] and sum(map(len, serial)) > len(trajs)
