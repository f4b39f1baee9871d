r"""The action grammar (UI-TARS style): one action per step, parsed and formatted with an exact round trip.

Grammar (one call, keyword arguments, single-quoted values; inside quotes the escapes \\ \' \n \r \t, and \uXXXX
for the other characters that would break a line, so an action is always one line):

    click(point='<point>x y</point>')           left_double(point=...)     right_single(point=...)
    drag(start_point='<point>x1 y1</point>', end_point='<point>x2 y2</point>')
    hotkey(key='ctrl c')     type(content='...')     scroll(point='<point>x y</point>', direction='down')
    wait()    finished(content='...')    press_home()    press_back()

Coordinates are non-negative integers in pixels of the stored screenshot. `format_action(parse_action(s)) == s`
holds for every string that `format_action` can produce, and `parse_action(format_action(a)) == a` for every
valid Action. Anything else raises ActionError with a message that says what is wrong.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: Coordinates above this are absurd for any screen (8K is 7680 wide); they are rejected, not clipped.
MAX_COORD = 16384

POINT_KINDS = ("click", "left_double", "right_single")
TEXT_KINDS = ("type", "finished")
NOARG_KINDS = ("wait", "press_home", "press_back")
KINDS = POINT_KINDS + ("drag", "hotkey", "scroll") + TEXT_KINDS + NOARG_KINDS
DIRECTIONS = ("up", "down", "left", "right")

_ARGS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(POINT_KINDS, ("point",)),
    "drag": ("start_point", "end_point"),
    "hotkey": ("key",),
    "type": ("content",),
    "finished": ("content",),
    "scroll": ("point", "direction"),
    **dict.fromkeys(NOARG_KINDS, ()),
}


class ActionError(ValueError):
    """An action string or Action that does not follow the grammar; the message says why."""


@dataclass(frozen=True, slots=True)
class Action:
    """A parsed action. Fields that a kind does not use are None."""

    kind: str
    x: int | None = None
    y: int | None = None
    x2: int | None = None
    y2: int | None = None
    text: str | None = None  # content of type/finished
    key: str | None = None  # hotkey, space-separated keys
    direction: str | None = None  # scroll

    def __post_init__(self) -> None:
        validate_action(self)

    @property
    def point(self) -> tuple[int, int] | None:
        return None if self.x is None or self.y is None else (self.x, self.y)


def _check_coord(name: str, v: object) -> None:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ActionError(f"{name} must be an integer pixel coordinate, got {v!r}")
    if v < 0:
        raise ActionError(f"{name}={v} is negative; coordinates are pixels of the screenshot")
    if v > MAX_COORD:
        raise ActionError(f"{name}={v} is absurd (> {MAX_COORD} px)")


def _check_unicode(kind: str, text: str) -> None:
    """Lone surrogates cannot be stored (Arrow and Parquet want UTF-8): refuse them here, by name."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ActionError(f"{kind} content is not valid Unicode (lone surrogate at {e.start})") from None


def validate_action(a: Action) -> None:
    """Raise ActionError unless the fields match what the kind needs."""
    if a.kind not in _ARGS:
        raise ActionError(f"unknown action kind {a.kind!r}; expected one of {', '.join(KINDS)}")
    needs_point = a.kind in POINT_KINDS or a.kind in ("drag", "scroll")
    for name in ("x", "y"):
        v = getattr(a, name)
        if needs_point:
            _check_coord(name, v)
        elif v is not None:
            raise ActionError(f"{a.kind} takes no {name}")
    for name in ("x2", "y2"):
        v = getattr(a, name)
        if a.kind == "drag":
            _check_coord(name, v)
        elif v is not None:
            raise ActionError(f"{a.kind} takes no {name}")
    if a.kind in TEXT_KINDS:
        if not isinstance(a.text, str):
            raise ActionError(f"{a.kind} needs content text")
        _check_unicode(a.kind, a.text)
    elif a.text is not None:
        raise ActionError(f"{a.kind} takes no content")
    if a.kind == "hotkey":
        if isinstance(a.key, str):
            _check_unicode("hotkey", a.key)
        if not isinstance(a.key, str) or not a.key.strip() or a.key != " ".join(a.key.split()):
            raise ActionError(f"hotkey needs keys separated by single spaces, got {a.key!r}")
        if "'" in a.key or "\\" in a.key:
            raise ActionError(f"hotkey keys may not contain quotes or backslashes: {a.key!r}")
    elif a.key is not None:
        raise ActionError(f"{a.kind} takes no key")
    if a.kind == "scroll":
        if a.direction not in DIRECTIONS:
            raise ActionError(f"scroll direction must be one of {DIRECTIONS}, got {a.direction!r}")
    elif a.direction is not None:
        raise ActionError(f"{a.kind} takes no direction")


#: Characters other than \n and \r that str.splitlines() breaks on: written as \uXXXX so an action stays one line.
_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_QUOTE_TABLE = str.maketrans(
    {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"} | {c: f"\\u{ord(c):04x}" for c in _LINE_BREAKS}
)


def _quote(s: str) -> str:
    return "'" + s.translate(_QUOTE_TABLE) + "'"


_UNESCAPE = {"\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", '"': '"'}


def _point(x: int | None, y: int | None) -> str:
    return f"'<point>{x} {y}</point>'"


def format_action(a: Action) -> str:
    """The canonical string of an action."""
    if a.kind in POINT_KINDS:
        return f"{a.kind}(point={_point(a.x, a.y)})"
    if a.kind == "drag":
        return f"drag(start_point={_point(a.x, a.y)}, end_point={_point(a.x2, a.y2)})"
    if a.kind == "hotkey":
        return f"hotkey(key={_quote(a.key or '')})"
    if a.kind in TEXT_KINDS:
        return f"{a.kind}(content={_quote(a.text or '')})"
    if a.kind == "scroll":
        return f"scroll(point={_point(a.x, a.y)}, direction={_quote(a.direction or '')})"
    return f"{a.kind}()"


_CALL = re.compile(r"\s*([a-z_]+)\s*\((.*)\)\s*", re.S)
# ASCII digits only: \d would also take Arabic-Indic or full-width digits, which then format differently.
_POINT = re.compile(r"\s*<point>\s*(-?[0-9]+)\s*[ ,]\s*(-?[0-9]+)\s*</point>\s*")
_BARE_POINT = re.compile(r"\s*\(?\s*(-?[0-9]+)\s*[ ,]\s*(-?[0-9]+)\s*\)?\s*")
_NAME = re.compile(r"\s*([a-z_]+)\s*=\s*")


def _read_quoted(s: str, i: int) -> tuple[str, int]:
    """Read a quoted string starting at s[i] (a single quote, or a double quote as some models write);
    return (value, index after the closing quote). Backslash escapes are the same for both delimiters."""
    quote = s[i]
    out: list[str] = []
    i += 1
    while i < len(s):
        c = s[i]
        if c == "\\":
            if i + 1 >= len(s):
                break
            nxt = s[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-f]{4}", s[i + 2 : i + 6]):
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            if nxt not in _UNESCAPE:
                raise ActionError(f"unknown escape \\{nxt} in quoted value")
            out.append(_UNESCAPE[nxt])
            i += 2
            continue
        if c == quote:
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ActionError("unterminated quoted value")


def _parse_args(body: str) -> dict[str, str]:
    args: dict[str, str] = {}
    i = 0
    while i < len(body):
        if body[i:].strip() == "":
            break
        m = _NAME.match(body, i)
        if not m:
            raise ActionError(f"expected name='value' at {body[i : i + 20]!r}")
        name = m.group(1)
        i = m.end()
        if i >= len(body) or body[i] not in "'\"":
            raise ActionError(f"value of {name} must be quoted")
        value, i = _read_quoted(body, i)  # double quotes from models are tolerated: same escapes
        if name in args:
            raise ActionError(f"argument {name} given twice")
        args[name] = value
        rest = body[i:].lstrip()
        if rest.startswith(","):
            i = len(body) - len(rest) + 1
        elif rest:
            raise ActionError(f"unexpected text after {name}: {rest[:20]!r}")
        else:
            break
    return args


def _parse_point(name: str, v: str) -> tuple[int, int]:
    m = _POINT.fullmatch(v)
    if not m:
        # accept the bare "(x,y)" / "x y" forms some models write
        m = _BARE_POINT.fullmatch(v)
    if not m:
        raise ActionError(f"{name} must look like <point>x y</point>, got {v!r}")
    return int(m.group(1)), int(m.group(2))


def parse_action(s: str) -> Action:
    """Parse an action string; raise ActionError saying what is wrong.

    Short strings are remembered (Actions are frozen): a search steps the same few actions in thousands of copies of
    a state, and parsing them again was a ninth of its time."""
    if not isinstance(s, str):
        raise ActionError(f"an action must be a string, got {type(s).__name__}")
    return _parse_cached(s) if len(s) <= _CACHE_LEN else _parse(s)


_CACHE_LEN = 256  # longer strings (typed text, hostile input) are parsed each time and never held


@functools.lru_cache(maxsize=4096)
def _parse_cached(s: str) -> Action:
    return _parse(s)


def _parse(s: str) -> Action:
    m = _CALL.fullmatch(s)
    if not m:
        raise ActionError(f"not an action call: {s[:60]!r}")
    kind, body = m.group(1), m.group(2)
    if kind not in _ARGS:
        raise ActionError(f"unknown action kind {kind!r}; expected one of {', '.join(KINDS)}")
    args = _parse_args(body)
    expected = set(_ARGS[kind])
    if set(args) != expected:
        missing, extra = expected - set(args), set(args) - expected
        parts = ([f"missing {', '.join(sorted(missing))}"] if missing else []) + (
            [f"unexpected {', '.join(sorted(extra))}"] if extra else []
        )
        raise ActionError(f"{kind}: {'; '.join(parts)}")
    if kind in POINT_KINDS:
        x, y = _parse_point("point", args["point"])
        return Action(kind, x=x, y=y)
    if kind == "drag":
        x, y = _parse_point("start_point", args["start_point"])
        x2, y2 = _parse_point("end_point", args["end_point"])
        return Action(kind, x=x, y=y, x2=x2, y2=y2)
    if kind == "scroll":
        x, y = _parse_point("point", args["point"])
        return Action(kind, x=x, y=y, direction=args["direction"])
    if kind == "hotkey":
        return Action(kind, key=args["key"])
    if kind in TEXT_KINDS:
        return Action(kind, text=args["content"])
    return Action(kind)


def check_on_screen(a: Action, width: int, height: int) -> None:
    """Raise ActionError if any coordinate of the action lies outside a width x height screen."""
    if width <= 0 or height <= 0:
        raise ActionError(f"screen size {width}x{height} is not a screen")
    for name, (x, y) in (("point", (a.x, a.y)), ("end_point", (a.x2, a.y2))):
        if x is None or y is None:
            continue
        if x >= width or y >= height:
            raise ActionError(f"{name} ({x}, {y}) is outside the {width}x{height} screen")
