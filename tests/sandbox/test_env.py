"""The Env API: observations, rewards, bad input, step limits, determinism."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.demonstrators import Expert
from sandbox.env import Env
from sandbox.families import FAMILIES, LEVELS
from sandbox.tasks import build, make_task
from schemas.actions import Action, format_action

LINE = re.compile(r'^(window "[^"]*" \d+x\d+|status "[^"]*"|page more (above|below|above and below)|'
                  r'[a-z]+ "[^"]*"( [^()]*)? \(\d+,\d+\))$')  # fmt: skip


def test_observation_lines_have_role_name_state_and_integer_centre() -> None:
    for fam in FAMILIES:
        for lvl in LEVELS:
            text = Env(make_task(fam, lvl, 3)).reset().text
            lines = text.splitlines()
            assert lines[0].startswith('window "') and lines[-1].startswith('status "')
            for ln in lines:
                assert LINE.match(ln), ln
            assert len(text) < 1200, (fam, lvl, len(text))


def test_click_hits_the_widget_whose_box_contains_the_point() -> None:
    env = Env(make_task("click_button", 1, 7))
    b = next(e for e in env.screen.elements() if e.role == "button")
    # a corner pixel of the box, not the centre
    r = env.step(format_action(Action("click", x=b.x + 1, y=b.y + 1)))
    assert b.name in r.info["effect"]


@pytest.mark.parametrize(
    "bad",
    ["", "click", "click(point='<point>10</point>')", "clack(point='<point>1 2</point>')", "type(content='unterminated)",
     "click(point='<point>-3 4</point>')", "scroll(point='<point>5 5</point>', direction='sideways')", "\x00\x01"],
)  # fmt: skip
def test_unreadable_action_ends_with_minus_one_and_a_reason(bad: str) -> None:
    env = Env(make_task("fill_form", 2, 1))
    r = env.step(bad)
    assert r.done and r.reward == -1.0 and r.info["outcome"] == "unreadable_action"
    assert r.info["error"].startswith("unreadable action:")
    v = env.verify()
    assert not v.passed and v.reason == "unreadable_action" and v.details["message"]


def test_off_screen_action_is_refused_with_its_own_reason() -> None:
    env = Env(make_task("click_button", 1, 1))
    r = env.step("click(point='<point>640 10</point>')")  # x == width is off screen
    assert r.done and r.reward == -1.0
    assert env.verify().reason == "off_screen_action" and "outside the 640x400 screen" in r.info["error"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=40), st.sampled_from([
    "click(point='<point>100 100</point>')", "scroll(point='<point>300 200</point>', direction='down')",
    "hotkey(key='escape')", "type(content='abc')", "hotkey(key='ctrl a')", "wait()", "press_back()",
    "drag(start_point='<point>1 1</point>', end_point='<point>9 9</point>')", "right_single(point='<point>5 60</point>')",
    "left_double(point='<point>320 200</point>')", "click(point='<point>99999 3</point>')"])), max_size=12),
    st.sampled_from(sorted(FAMILIES)), st.integers(1, 5))  # fmt: skip
def test_no_action_sequence_raises(actions: list[str], fam: str, lvl: int) -> None:
    env = Env(make_task(fam, lvl, 11))
    for a in actions:
        r = env.step(a)
        assert isinstance(r.observation.text, str)
        assert r.reward in (-1.0, 0.0, 1.0)
    v = env.verify()
    assert isinstance(v.passed, bool) and v.reason


def test_step_limit_ends_the_episode() -> None:
    t = make_task("menu_path", 3, 2)
    env = Env(t)
    for _ in range(t.max_steps):
        r = env.step("wait()")
    assert r.done and env.outcome == "step_limit" and r.reward == 0.0
    v = env.verify()
    assert v.reason == "step_limit" and "never run" in v.details["message"]
    again = env.step("wait()")  # stepping a finished episode is answered, not raised
    assert again.done and "over" in again.info["error"]


def test_finished_early_fails_with_not_done() -> None:
    env = Env(make_task("checkboxes", 2, 4))
    r = env.step("finished(content='')")
    assert r.done and r.reward == 0.0 and env.verify().reason == "not_done"


def test_same_seed_same_screens_and_png_bytes() -> None:
    for fam in FAMILIES:
        t = make_task(fam, 4, 21)
        runs = []
        for _ in range(2):
            env, ex = Env(t, screenshots=True), Expert()
            ex.reset(t)
            trace = [(env.observation().text, env.observation().screenshot)]
            while not env.done:
                r = env.step(ex.act(env).action)
                trace.append((r.observation.text, r.observation.screenshot))
            runs.append(trace)
        assert runs[0] == runs[1]
        assert runs[0][0][1][:8] == b"\x89PNG\r\n\x1a\n"
    assert make_task("answer", 3, 5) == make_task("answer", 3, 5)
    assert build("answer", 3, 5).screen.text() != build("answer", 3, 6).screen.text()


def test_screen_size_is_configurable() -> None:
    t = make_task("fill_form", 3, 2, width=1024, height=768)
    env = Env(t, screenshots=True)
    assert env.observation().text.splitlines()[0].endswith("1024x768")
    import io

    from PIL import Image

    assert Image.open(io.BytesIO(env.observation().screenshot)).size == (1024, 768)
    with pytest.raises(ValueError, match="too small"):
        make_task("fill_form", 3, 2, width=100, height=100)
