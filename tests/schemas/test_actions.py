"""The action grammar: exact round trips (property-tested over every kind), clear errors for everything else."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from schemas.actions import (
    DIRECTIONS,
    KINDS,
    MAX_COORD,
    NOARG_KINDS,
    POINT_KINDS,
    TEXT_KINDS,
    Action,
    ActionError,
    check_on_screen,
    format_action,
    parse_action,
)

coord = st.integers(0, MAX_COORD)
#: any Unicode text (no lone surrogates: those are refused, see below), rich in the characters that need escaping
special = st.sampled_from(
    [
        "'",
        '"',
        "\\",
        "\n",
        "\r",
        "\t",
        "\\'",
        "')",
        "<point>1 2</point>",
        ", content='x'",
        "\\n",
        "\\u2028",
        "\u2028",
        "\x85",
        "\x0c",
    ]
)
text = st.lists(st.one_of(st.text(max_size=8), special), max_size=8).map("".join)
key_token = st.text(
    st.characters(blacklist_categories=("Cs", "Z", "Cc"), blacklist_characters="'\\"), min_size=1, max_size=6
)
keys = st.lists(key_token, min_size=1, max_size=4).map(" ".join).filter(lambda k: k == " ".join(k.split()))


def actions_of(kind: str) -> st.SearchStrategy[Action]:
    if kind in POINT_KINDS:
        return st.builds(Action, st.just(kind), x=coord, y=coord)
    if kind == "drag":
        return st.builds(Action, st.just(kind), x=coord, y=coord, x2=coord, y2=coord)
    if kind == "scroll":
        return st.builds(Action, st.just(kind), x=coord, y=coord, direction=st.sampled_from(DIRECTIONS))
    if kind == "hotkey":
        return st.builds(Action, st.just(kind), key=keys)
    if kind in TEXT_KINDS:
        return st.builds(Action, st.just(kind), text=text)
    return st.just(Action(kind))


any_action = st.sampled_from(KINDS).flatmap(actions_of)


def test_every_kind_is_covered() -> None:
    assert set(KINDS) == set(POINT_KINDS) | {"drag", "scroll", "hotkey"} | set(TEXT_KINDS) | set(NOARG_KINDS)
    assert len(KINDS) == 11


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(any_action)
@example(Action("type", text="it's a \\'quoted\\' \"word\"\nnext line\twith tab"))
@example(Action("finished", text="日本語 — ünïcödé 🙂 ')"))
@example(Action("type", text=""))
@example(Action("type", text="line\u2028sep\x85nel\x0bvt \\u2028 literal"))
@example(Action("hotkey", key="ctrl shift ü"))
def test_exact_round_trip(a: Action) -> None:
    s = format_action(a)
    assert parse_action(s) == a
    assert format_action(parse_action(s)) == s
    assert len(s.splitlines()) == 1  # one action is one line, whatever the content


@pytest.mark.parametrize(
    "s",
    [
        "click(point='<point>0 0</point>')",
        "left_double(point='<point>1919 1079</point>')",
        "right_single(point='<point>5 6</point>')",
        "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
        "hotkey(key='ctrl c')",
        "type(content='hello \\'world\\'\\n')",
        "scroll(point='<point>10 20</point>', direction='down')",
        "wait()",
        "finished(content='The answer is 42.')",
        "press_home()",
        "press_back()",
    ],
)
def test_canonical_strings_of_every_kind_round_trip(s: str) -> None:
    assert format_action(parse_action(s)) == s


def test_model_variants_are_read_leniently_and_formatted_canonically() -> None:
    assert parse_action('type(content="say \\"hi\\" it\'s")') == Action("type", text='say "hi" it\'s')
    assert parse_action("click(point='(10,20)')") == Action("click", x=10, y=20)
    assert parse_action("  click( point = '<point>10,20</point>' )  ") == Action("click", x=10, y=20)
    assert format_action(parse_action("click(point='(10,20)')")) == "click(point='<point>10 20</point>')"


@pytest.mark.parametrize(
    ("s", "says"),
    [
        ("", "not an action call"),
        ("click", "not an action call"),
        ("Click(point='<point>1 2</point>')", "not an action call"),
        ("tap(point='<point>1 2</point>')", "unknown action kind 'tap'"),
        ("click()", "missing point"),
        ("click(point='<point>1 2</point>', button='left')", "unexpected button"),
        ("click(point=<point>1 2</point>)", "must be quoted"),
        ("click(point='<point>1 2</point>", "not an action call"),
        ("click(point='<point>1 2</point>)", "unterminated"),
        ("click(point='<point>a b</point>')", "must look like <point>x y</point>"),
        ("click(point='<point>1.5 2</point>')", "must look like <point>x y</point>"),
        ("click(point='<point>١ ٢</point>')", "must look like <point>x y</point>"),  # non-ASCII digits
        ("click(point='<point>1 2</point>') extra", "not an action call"),
        ("drag(start_point='<point>1 2</point>')", "missing end_point"),
        ("scroll(point='<point>1 2</point>', direction='sideways')", "scroll direction"),
        ("hotkey(key='')", "hotkey needs keys"),
        ("hotkey(key='ctrl  c')", "single spaces"),
        ("type(content='a\\q')", "unknown escape \\q"),
        ("type(content='abc\\')", "unterminated"),
        ("type(content='a', content='b')", "given twice"),
        ("type(content='a' 'b')", "unexpected text"),
        ("wait(x='1')", "unexpected x"),
    ],
)
def test_malformed_strings_are_refused_clearly(s: str, says: str) -> None:
    with pytest.raises(ActionError) as e:
        parse_action(s)
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("s", "says"),
    [
        ("click(point='<point>-1 5</point>')", "x=-1 is negative"),
        ("click(point='<point>5 -30</point>')", "y=-30 is negative"),
        ("drag(start_point='<point>1 2</point>', end_point='<point>-3 4</point>')", "x2=-3 is negative"),
        (f"scroll(point='<point>{MAX_COORD + 1} 0</point>', direction='up')", "is absurd"),
        (f"left_double(point='<point>0 {10**40}</point>')", "is absurd"),
    ],
)
def test_negative_and_absurd_coordinates_are_refused(s: str, says: str) -> None:
    with pytest.raises(ActionError, match=says):
        parse_action(s)


@given(
    st.sampled_from(POINT_KINDS + ("drag", "scroll")),
    st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_COORD + 1)),
)
def test_out_of_range_coordinates_never_build_an_action(kind: str, bad: int) -> None:
    extra = {"x2": 1, "y2": 1} if kind == "drag" else {"direction": "up"} if kind == "scroll" else {}
    with pytest.raises(ActionError, match=f"x={bad}"):
        Action(kind, x=bad, y=1, **extra)
    with pytest.raises(ActionError):
        parse_action(format_action(Action(kind, x=0, y=1, **extra)).replace("<point>0 1", f"<point>{bad} 1", 1))


@pytest.mark.parametrize(
    "kw",
    [
        {"kind": "click", "x": 1},  # y missing
        {"kind": "click", "x": 1.0, "y": 2},
        {"kind": "click", "x": True, "y": 2},
        {"kind": "wait", "x": 1, "y": 2},
        {"kind": "type"},
        {"kind": "type", "text": "a", "key": "ctrl"},
        {"kind": "hotkey", "key": "ctrl 'c'"},
        {"kind": "finished", "text": "lone \ud800 surrogate"},
        {"kind": "jump"},
    ],
)
def test_invalid_action_objects_are_refused(kw: dict) -> None:
    with pytest.raises(ActionError):
        Action(**kw)


@settings(max_examples=400)
@given(st.text(max_size=60))
@example("type(content='\\")
@example("drag(start_point='<point>1 2</point>', end_point=")
def test_arbitrary_text_gives_an_action_or_an_action_error(s: str) -> None:
    try:
        a = parse_action(s)
    except ActionError:
        return
    assert parse_action(format_action(a)) == a


@given(any_action, st.data())
def test_proper_prefixes_of_an_action_are_refused(a: Action, data: st.DataObject) -> None:
    s = format_action(a)
    cut = data.draw(st.integers(0, len(s) - 1))
    with pytest.raises(ActionError):
        parse_action(s[:cut])


@given(any_action, st.integers(1, 4000), st.integers(1, 4000))
def test_check_on_screen_agrees_with_the_coordinates(a: Action, w: int, h: int) -> None:
    points = [(x, y) for x, y in ((a.x, a.y), (a.x2, a.y2)) if x is not None]
    inside = all(x < w and y < h for x, y in points)
    if inside:
        check_on_screen(a, w, h)
    else:
        with pytest.raises(ActionError, match=f"outside the {w}x{h} screen"):
            check_on_screen(a, w, h)


def test_check_on_screen_edges() -> None:
    check_on_screen(Action("click", x=1919, y=1079), 1920, 1080)
    with pytest.raises(ActionError, match="end_point"):
        check_on_screen(Action("drag", x=0, y=0, x2=1920, y2=5), 1920, 1080)
    with pytest.raises(ActionError, match="not a screen"):
        check_on_screen(Action("wait"), 0, 1080)


def test_remembered_parses_are_the_same_actions_and_refusals_are_refused_every_time() -> None:
    """parse_action remembers short strings (a search steps the same actions in thousands of copies): a second parse
    gives an equal Action, a bad string is refused each time, and a long one is parsed, not held."""
    s = "click(point='<point>12 34</point>')"
    assert parse_action(s) == parse_action(s) == Action("click", x=12, y=34)
    for _ in range(2):
        with pytest.raises(ActionError, match="not an action call"):
            parse_action("click me")
    long = "type(content='" + "x" * 1000 + "')"
    assert parse_action(long).text == "x" * 1000
    with pytest.raises(ActionError, match="must be a string"):
        parse_action(["click"])  # type: ignore[arg-type]
