"""The MiniWoB++ backend through the sandbox's environment API: observations, real input events, rewards."""

from __future__ import annotations

import io
import re

from PIL import Image

from sandbox.miniwob import TaskSpec
from tests.miniwob.conftest import click, find

LINE = re.compile(r'^(button|textbox|checkbox|radio|dropdown|option|link|tab|dialog|text) "[^"]*"( \S+)* \(\d+,\d+\)$')


def test_observation_has_the_sandbox_shape_and_a_screenshot(env) -> None:
    obs = env.reset(TaskSpec("click-checkboxes", 11))
    lines = obs.text.splitlines()
    assert lines[0] == 'window "click-checkboxes" 160x210'
    assert all(LINE.match(ln) for ln in lines[1:]), obs.text
    assert (obs.step, obs.width, obs.height) == (0, 160, 210)
    img = Image.open(io.BytesIO(obs.screenshot))
    assert img.size == (160, 210) and img.format == "PNG"
    lo, hi = img.convert("L").getextrema()
    assert hi - lo > 100  # a drawn page, not a blank frame
    boxes = [e for e in env.elements if e.role == "checkbox"]
    assert boxes and all(e.states == ("unchecked",) for e in boxes)
    assert env.task.instruction == env.utterance and env.task.task_id == "miniwob/click-checkboxes/s11"


def test_right_and_wrong_button_rewards(env) -> None:
    env.reset(TaskSpec("click-button", 3))
    target = dict(env.fields)["target"]
    r = env.step(click(find(env, "button", target)))
    assert r.done and r.reward == 1.0 and r.info["passed"] and r.info["raw_reward"] == 1.0
    assert env.verify().passed and env.verify().details["raw_reward"] == 1.0
    env.reset(TaskSpec("click-button", 3))
    wrong = next(e for e in env.elements if e.role == "button" and e.name != target)
    r = env.step(click(wrong))
    assert r.done and r.reward == 0.0 and not r.info["passed"]
    assert r.info["reason"] == "task_failed" and r.info["raw_reward"] == -1.0 and r.info["outcome"] == "ended"


def test_typing_is_real_key_events_and_the_form_passes(env) -> None:
    env.reset(TaskSpec("enter-text", 8))
    want = dict(env.fields)["target"]
    box = find(env, "textbox")
    env.browser.driver.execute_script(
        "window._ev = []; for (const t of ['click', 'keydown']) document.addEventListener(t, e => window._ev.push([t, e.isTrusted]), true);"
    )
    r = env.step(click(box))
    assert not r.done and "focused" in find(env, "textbox").states
    r = env.step(f"type(content='{want}')")
    assert f'value="{want}"' in r.observation.text
    events = env.browser.driver.execute_script("return window._ev;")
    assert events[0] == ["click", True] and sum(1 for t, _ in events if t == "keydown") == len(want)
    assert all(trusted for _, trusted in events)  # browser input events, not JavaScript clicks
    r = env.step(click(find(env, "button", "Submit")))
    assert r.done and r.reward == 1.0 and r.observation.step == 3


def test_bad_actions_end_like_the_sandbox(env) -> None:
    env.reset(TaskSpec("click-link", 2))
    r = env.step("click(point=12 40)")
    assert (
        r.done
        and r.reward == -1.0
        and r.info["outcome"] == "unreadable_action"
        and env.verify().reason == "unreadable_action"
    )
    assert env.step("wait()").info["error"]  # stepping a finished episode answers with an error
    env.reset(TaskSpec("click-link", 2))
    r = env.step("click(point='<point>500 40</point>')")
    assert r.done and r.reward == -1.0 and env.verify().reason == "off_screen_action"
    env.reset(TaskSpec("click-link", 2))
    r = env.step("finished(content='done')")
    assert r.done and r.reward == 0.0 and env.verify().reason == "not_done" and env.answer == "done"


def test_step_limit_and_miniwob_timer(pool) -> None:
    from sandbox.miniwob import MiniwobEnv

    env = pool.env(1)
    env.reset(TaskSpec("focus-text", 4))
    for _ in range(env.max_steps):
        r = env.step("hotkey(key='shift')")
    assert r.done and r.info["outcome"] == "step_limit" and env.verify().reason == "step_limit"
    quick = MiniwobEnv(TaskSpec("focus-text", 4), browser=env.browser, time_limit_s=0.4, proxy_port=pool.guard.port)
    r = quick.step("wait()")
    r = quick.step("wait()") if not r.done else r
    assert r.done and r.info["reason"] == "timed_out" and r.info["raw_reward"] == -1.0
