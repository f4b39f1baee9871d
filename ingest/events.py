"""Event reduction: raw mouse and keyboard events -> actions of the grammar (schemas.actions).

Recorders log thousands of events per minute, nearly all pointer moves. The checks (times finite and in order,
known types, required fields, presses on screen) run column-wise on an Arrow table, and the moves are dropped
with one mask before the small state machine that pairs presses with releases, joins keystrokes into text and
wheel ticks into scrolls.

Rules: press + release of the left button -> click, or drag when the pointer moved more than `drag_px`; two
left clicks within `double_click_s` and `drag_px` -> left_double; right button -> right_single. Keystrokes
without ctrl/alt/cmd -> one type(content) with backspace applied (enter ends it with "\\n"); with a modifier,
or a named key (tab, esc, arrows, f-keys, ...) -> hotkey. Wheel ticks in one direction no more than
`scroll_gap_s` apart -> one scroll. Coordinates are multiplied by `scale` (screen -> screenshot pixels).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.errors import InputError
from ingest import safejson
from schemas.actions import Action

EVENT_TYPES = ("mouse_move", "mouse_down", "mouse_up", "wheel", "key_down", "key_up")
RAW_SCHEMA = pa.schema(
    [
        pa.field("t", pa.float64()),
        pa.field("type", pa.string()),
        pa.field("x", pa.float64()),
        pa.field("y", pa.float64()),
        pa.field("button", pa.string()),
        pa.field("dx", pa.float64()),
        pa.field("dy", pa.float64()),
        pa.field("key", pa.string()),
        pa.field("line", pa.int64()),
    ]
)

MODIFIERS = {
    "ctrl": "ctrl", "ctrl_l": "ctrl", "ctrl_r": "ctrl", "control": "ctrl",
    "alt": "alt", "alt_l": "alt", "alt_r": "alt", "alt_gr": "alt", "option": "alt",
    "shift": "shift", "shift_l": "shift", "shift_r": "shift",
    "cmd": "cmd", "cmd_l": "cmd", "cmd_r": "cmd", "win": "cmd", "super": "cmd", "meta": "cmd",
}  # fmt: skip
MOD_ORDER = ("ctrl", "alt", "shift", "cmd")
ALIASES = {"return": "enter", "escape": "esc", "del": "delete", "space": " ", "spacebar": " ", "page_up": "pageup",
           "page_down": "pagedown", "bksp": "backspace"}  # fmt: skip


class EventError(InputError):
    """Events that cannot become actions; `code` is the quarantine error_type, `locator` says where."""


@dataclass(frozen=True)
class TimedAction:
    """An action with the session times of its first and last raw event."""

    t_start: float
    t_end: float
    action: Action


def parse_jsonl(text: str, name: str = "events.jsonl") -> list[dict[str, Any]]:
    """JSON lines -> dicts (each with its line number); a broken line raises EventError naming it."""
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = safejson.loads(line, f"{name} line {i}", f"{name}:{i}")
        except json.JSONDecodeError as e:
            raise EventError("events_invalid_json", f"{name} line {i}: {e.msg}", f"{name}:{i}") from None
        if not isinstance(obj, dict):
            raise EventError("events_invalid_json", f"{name} line {i}: not a JSON object", f"{name}:{i}")
        obj["line"] = i
        rows.append(obj)
    return rows


def to_table(rows: Sequence[dict[str, Any]], offset: float = 0.0) -> pa.Table:
    """Raw event dicts -> an Arrow table (RAW_SCHEMA), times moved onto the session clock."""
    cols: dict[str, list[Any]] = {n: [] for n in RAW_SCHEMA.names}
    for i, r in enumerate(rows):
        for n in RAW_SCHEMA.names:
            v = r.get(n, i + 1 if n == "line" else None)
            if n in ("t", "x", "y", "dx", "dy") and v is not None:
                v = _num(v, n, r.get("line", i + 1))
            elif n in ("type", "button", "key") and v is not None:
                v = str(v)
            cols[n].append(v)
    t = pa.table(cols, schema=RAW_SCHEMA)
    if offset:
        t = t.set_column(0, "t", pc.add(t.column("t"), offset))
    return t


def _num(v: Any, name: str, line: int) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "infinity"):
            return float(v)
        raise EventError("event_bad_field", f"event at line {line}: {name} must be a number, got {v!r}", f"line {line}")
    return float(v)


def _first(mask: pa.ChunkedArray | pa.Array, table: pa.Table) -> str:
    idx = int(np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))[0])
    return f"line {table.column('line')[idx].as_py()}"


def validate(table: pa.Table, width: int, height: int) -> None:
    """Column-wise checks; raises EventError with a code per kind of problem."""
    if table.num_rows == 0:
        raise EventError("events_empty", "the events file holds no events")
    t = table.column("t")
    if t.null_count:
        raise EventError("event_bad_time", "an event has no time", _first(pc.is_null(t), table))
    tn = t.to_numpy()
    bad = ~np.isfinite(tn)
    if bad.any():
        raise EventError("event_bad_time", "an event time is NaN or infinite", _first(pa.array(bad), table))
    back = np.diff(tn) < 0
    if back.any():
        i = int(np.flatnonzero(back)[0]) + 1
        raise EventError(
            "events_out_of_order",
            f"event times go backwards ({tn[i - 1]:.3f} -> {tn[i]:.3f} s)",
            f"line {table.column('line')[i].as_py()}",
        )
    ty = table.column("type")
    unknown = pc.invert(pc.fill_null(pc.is_in(ty, pa.array(EVENT_TYPES)), False))
    if pc.any(unknown).as_py():
        idx = int(np.flatnonzero(unknown.to_numpy(zero_copy_only=False))[0])
        raise EventError(
            "event_unknown_type",
            f"unknown event type {ty[idx].as_py()!r}; known: {', '.join(EVENT_TYPES)}",
            f"line {table.column('line')[idx].as_py()}",
        )
    pointer = pc.is_in(ty, pa.array(["mouse_move", "mouse_down", "mouse_up", "wheel"]))
    for col, kinds in (("x", None), ("y", None), ("button", ("mouse_down", "mouse_up")), ("dx", ("wheel",)),
                       ("dy", ("wheel",)), ("key", ("key_down", "key_up"))):  # fmt: skip
        need = pointer if kinds is None else pc.is_in(ty, pa.array(kinds))
        missing = pc.and_(need, pc.is_null(table.column(col)))
        if pc.any(missing).as_py():
            raise EventError("event_bad_field", f"an event of this type needs {col!r}", _first(missing, table))
    for col in ("x", "y", "dx", "dy"):
        v = table.column(col).to_numpy(zero_copy_only=False).astype(float)
        if np.isinf(v).any() or (np.isnan(v) & ~pc.is_null(table.column(col)).to_numpy(zero_copy_only=False)).any():
            raise EventError("event_bad_field", f"{col} is NaN or infinite", f"column {col}")
    acts = pc.is_in(ty, pa.array(["mouse_down", "mouse_up", "wheel"]))
    x, y = table.column("x"), table.column("y")
    off = pc.and_(acts, pc.or_(pc.or_(pc.less(x, 0), pc.greater_equal(x, width)),
                               pc.or_(pc.less(y, 0), pc.greater_equal(y, height))))  # fmt: skip
    off = pc.fill_null(off, False)
    if pc.any(off).as_py():
        idx = int(np.flatnonzero(off.to_numpy(zero_copy_only=False))[0])
        raise EventError("event_off_screen", f"a press at ({x[idx].as_py():g}, {y[idx].as_py():g}) lies outside the "
                         f"{width}x{height} screen", f"line {table.column('line')[idx].as_py()}")  # fmt: skip


def norm_key(k: str) -> str:
    """A recorder key name -> ours: 'Key.ctrl_l' -> 'ctrl', 'Return' -> 'enter', 'A' stays 'A'."""
    k = k.removeprefix("Key.")
    if len(k) == 1:
        return k
    low = k.lower()
    low = ALIASES.get(low, low)
    return MODIFIERS.get(low, low)


def reduce_events(
    events: pa.Table | Sequence[dict[str, Any]],
    scale: tuple[float, float] = (1.0, 1.0),
    double_click_s: float = 0.5,
    drag_px: float = 5.0,
    scroll_gap_s: float = 1.0,
) -> list[TimedAction]:
    """Reduce validated raw events (session times) to timed actions in screenshot pixels."""
    table = events if isinstance(events, pa.Table) else to_table(events)
    table = table.filter(pc.not_equal(table.column("type"), "mouse_move"))  # the bulk: bare moves go first
    sx, sy = scale
    out: list[TimedAction] = []
    held: set[str] = set()
    used_with_mod: set[str] = set()
    buf: list[str] = []
    buf_t: list[float] = []
    press: dict[str, tuple[float, float, float]] = {}
    last_click: tuple[float, float, float] | None = None  # (t_press, x, y) of the last single left click
    scroll: dict[str, Any] | None = None

    def px(x: float, y: float) -> tuple[int, int]:
        return int(round(x * sx)), int(round(y * sy))

    def flush_type() -> None:
        nonlocal buf, buf_t
        if buf:
            out.append(TimedAction(buf_t[0], buf_t[-1], Action("type", text="".join(buf))))
        buf, buf_t = [], []

    def flush_scroll() -> None:
        nonlocal scroll
        if scroll:
            x, y = px(scroll["x"], scroll["y"])
            out.append(TimedAction(scroll["t0"], scroll["t1"], Action("scroll", x=x, y=y, direction=scroll["dir"])))
        scroll = None

    def hotkey(t: float, keys: Iterable[str]) -> None:
        flush_type()
        flush_scroll()
        out.append(TimedAction(t, t, Action("hotkey", key=" ".join(keys))))

    cols = {n: table.column(n).to_pylist() for n in ("t", "type", "x", "y", "button", "dx", "dy", "key")}
    for t, ty, x, y, button, dx, dy, key in zip(*cols.values()):
        if ty == "wheel":
            flush_type()
            d = ("up" if dy > 0 else "down") if dy else ("right" if dx > 0 else "left") if dx else None
            if d is None:
                continue
            if (
                scroll
                and scroll["dir"] == d
                and t - scroll["t1"] <= scroll_gap_s
                and math.dist((x, y), (scroll["x"], scroll["y"])) <= 50
            ):
                scroll["t1"] = t
            else:
                flush_scroll()
                scroll = {"t0": t, "t1": t, "x": x, "y": y, "dir": d}
            continue
        if ty == "mouse_down":
            flush_type()
            flush_scroll()
            press[button] = (t, x, y)
            continue
        if ty == "mouse_up":
            if button not in press:
                continue  # a release whose press happened before the recording started
            t0, x0, y0 = press.pop(button)
            moved = math.dist((x0, y0), (x, y)) > drag_px
            if button == "left" and moved:
                (a, b), (c, d2) = px(x0, y0), px(x, y)
                out.append(TimedAction(t0, t, Action("drag", x=a, y=b, x2=c, y2=d2)))
                last_click = None
            elif button == "left":
                a, b = px(x0, y0)
                if (
                    last_click
                    and t0 - last_click[0] <= double_click_s
                    and math.dist(last_click[1:], (x0, y0)) <= drag_px
                ):
                    prev = out.pop()
                    out.append(TimedAction(prev.t_start, t, Action("left_double", x=prev.action.x, y=prev.action.y)))
                    last_click = None
                else:
                    out.append(TimedAction(t0, t, Action("click", x=a, y=b)))
                    last_click = (t0, x0, y0)
            elif button == "right":
                a, b = px(x0, y0)
                out.append(TimedAction(t0, t, Action("right_single", x=a, y=b)))
                last_click = None
            continue
        k = norm_key(key)
        if ty == "key_up":
            if k in held:
                held.discard(k)
                if k == "cmd" and k not in used_with_mod:
                    hotkey(t, ["cmd"])  # the Windows/Command key alone opens a menu: a real action
                used_with_mod.discard(k)
            continue
        # key_down
        last_click = None
        if k in MOD_ORDER:
            held.add(k)
            continue
        mods = [m for m in MOD_ORDER if m in held and m != "shift"]
        if mods:
            used_with_mod.update(mods)
            shift = ["shift"] if "shift" in held else []
            hotkey(t, [m for m in MOD_ORDER if m in mods + shift] + [k.lower()])
            continue
        flush_scroll()
        if len(k) == 1:
            buf.append(k.upper() if "shift" in held and k.isalpha() else k)
            buf_t.append(t)
        elif k == "backspace" and buf:
            buf.pop()
            buf_t.append(t)  # keep the edit's time in the span
            if not buf:
                buf_t = []
        elif k == "enter" and buf:
            buf.append("\n")
            buf_t.append(t)
            flush_type()
        else:
            hotkey(t, (["shift"] if "shift" in held else []) + [k])
    for t0, x0, y0 in press.values():  # pressed but never released before the recording ended
        a, b = px(x0, y0)
        out.append(TimedAction(t0, t0, Action("click", x=a, y=b)))
    flush_type()
    flush_scroll()
    out.sort(key=lambda a: a.t_start)
    return out
