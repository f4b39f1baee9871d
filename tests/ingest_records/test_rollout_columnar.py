"""The columnar paths agree with the record types: episode ids with Episode.content_hash, actions with parse_action."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.rollouts import episode_ids, parse_actions
from schemas.actions import Action, ActionError, format_action, parse_action
from schemas.records import Episode, Step

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
opt_text = st.none() | text
sha = st.none() | st.text("0123456789abcdef", min_size=64, max_size=64)
steps = st.lists(st.tuples(text, opt_text, sha), max_size=4)
episodes = st.lists(
    st.tuples(
        st.sampled_from(["rollout", "interactive"]), text, text, text, st.none() | st.integers(0, 99), opt_text, steps
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(episodes)
def test_vectorised_ids_equal_episode_content_hash(eps: list) -> None:
    records = [
        Episode(
            session_id=sid,
            source=src,
            task_id=tid,
            instruction=ins,
            attempt=att,
            group_id=gid,
            steps=tuple(
                Step(index=k, action=a, thought=th or "", screenshot_sha256=h) for k, (a, th, h) in enumerate(ss)
            ),
        )
        for src, sid, tid, ins, att, gid, ss in eps
    ]
    offsets = np.cumsum([0] + [len(e[6]) for e in eps])
    flat = [s for e in eps for s in e[6]]
    col = lambda i: pa.array([e[i] for e in eps], pa.string())
    ids = episode_ids(
        col(0),
        col(1),
        col(2),
        col(3),
        pa.array([e[4] for e in eps], pa.int64()),
        col(5),
        pa.array(offsets),
        pa.array([s[0] for s in flat], pa.string()),
        pa.array([s[1] for s in flat], pa.string()),
        pa.array([s[2] for s in flat], pa.string()),
    )
    assert ids.to_pylist() == [e.episode_id for e in records]


coord = st.integers(0, 16384)  # Action refuses more; ODD holds strings above the limit
actions = st.one_of(
    st.builds(
        lambda k, x, y: Action(k, x=x, y=y), st.sampled_from(["click", "left_double", "right_single"]), coord, coord
    ),
    st.builds(lambda x, y, a, b: Action("drag", x=x, y=y, x2=a, y2=b), coord, coord, coord, coord),
    st.builds(
        lambda x, y, d: Action("scroll", x=x, y=y, direction=d),
        coord,
        coord,
        st.sampled_from(["up", "down", "left", "right"]),
    ),
    st.builds(lambda k: Action("hotkey", key=k), st.sampled_from(["ctrl c", "alt F4", "enter", "ctrl shift t", "a"])),
    st.builds(lambda k, t: Action(k, text=t), st.sampled_from(["type", "finished"]), text),
    st.builds(Action, st.sampled_from(["wait", "press_home", "press_back"])),
)


ODD = [
    "click(point='<point>1 2</point>')",
    " click( point = '<point>1 2</point>' ) ",
    'click(point="<point>3 4</point>")',
    "click(point='(5,6)')",
    "click(point='<point>007 8</point>')",
    "click(point='<point>-1 2</point>')",
    "click(point='<point>16385 2</point>')",
    "click(point='<point>16384 2</point>')",
    "type(content='a\\'b')",
    "type(content='a\\nb')",
    "type(content='')",
    "type(content='x') y')",
    "hotkey(key='ctrl  c')",
    "hotkey(key=' ctrl')",
    "hotkey(key='ctrl\u00a0c')",
    "scroll(point='<point>1 2</point>', direction='sideways')",
    "teleport(x='1')",
    "wait( )",
    "wait()",
    "press_home()",
    "finished(content='done')",
    "",
    "click",
    "click(point='<point>1 2</point>', x='1')",
    "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
]


@settings(max_examples=200, deadline=None)
@given(st.lists(actions, max_size=8), st.lists(st.sampled_from(ODD), max_size=8), st.lists(text, max_size=3))
def test_vectorised_actions_equal_parse_action(acts: list, odd: list, junk: list) -> None:
    strings = [format_action(a) for a in acts] + odd + junk
    cols, ok, errors = parse_actions(pa.array(strings, pa.string()))
    for i, s in enumerate(strings):
        try:
            a = parse_action(s)
        except ActionError as e:
            assert not ok[i] and errors[i] == str(e), s
            assert cols["action_type"][i].as_py() is None
            continue
        assert ok[i], s
        got = tuple(cols[f][i].as_py() for f in ("action_type", "x", "y", "x2", "y2", "text", "key", "direction"))
        assert got == (a.kind, a.x, a.y, a.x2, a.y2, a.text, a.key, a.direction), s


def test_canonical_actions_take_the_vector_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Canonical strings never reach the per-row fallback (errors list stays None and all are readable)."""
    strings = [
        "click(point='<point>1 2</point>')",
        "type(content='hi there')",
        "hotkey(key='ctrl c')",
        "wait()",
        "scroll(point='<point>5 6</point>', direction='up')",
        "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
    ] * 1000
    import ingest.rollouts as r

    calls: list[str] = []
    monkeypatch.setattr(r, "parse_action", lambda s: calls.append(s) or parse_action(s))  # a spy: the real parser runs
    cols, ok, _ = parse_actions(pa.array(strings))
    assert ok.all() and calls == []
    assert cols["x"].to_pylist()[:2] == [1, None]
