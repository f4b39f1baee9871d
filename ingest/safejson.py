"""The one JSON parser for input files: `loads` with a nesting-depth and a size limit (core settings
`json_max_depth`, `json_max_bytes`), raising InputError with a quarantine code instead of a RecursionError or a
parse that eats the machine. Every reader of the three input formats and `flywheel upload --check-only` parses here.

The depth is measured before parsing, vectorised: strings are blanked with one regex pass, everything but
brackets is dropped (`bytes.translate`), and the running depth is a numpy cumulative sum."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from core.errors import InputError

#: JSON strings (escapes included): their brackets are text, not nesting.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_KEEP = b"[]{}"
_DROP = bytes(b for b in range(256) if b not in _KEEP)


def depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in `raw` (JSON text, possibly invalid)."""
    if raw.count(b"[") + raw.count(b"{") <= 1:
        return int(raw.count(b"[") + raw.count(b"{"))
    brackets = _STRING.sub(b'""', raw).translate(None, _DROP)
    if not brackets:
        return 0
    a = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((a == ord("[")) | (a == ord("{")), 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0))


def check(raw: bytes | str, what: str, locator: str | None = None) -> bytes:
    """`raw` as bytes, or InputError json_too_large / json_too_deep (the limits are core settings)."""
    from core.settings import get_settings

    s = get_settings()
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data) > s.json_max_bytes:
        raise InputError(
            "json_too_large",
            f"{what} is {len(data):,} bytes of JSON, over the limit of {s.json_max_bytes:,} (json_max_bytes)",
            locator,
        )
    if data.count(b"[") + data.count(b"{") > s.json_max_depth:
        d = depth(data)
        if d > s.json_max_depth:
            raise InputError(
                "json_too_deep",
                f"{what} nests {d} levels deep, over the limit of {s.json_max_depth} (json_max_depth)",
                locator,
            )
    return data


def non_finite(doc: Any, path: str = "") -> str | None:
    """The path of the first NaN or infinite number in a parsed document (json.loads accepts NaN, Infinity and
    1e999), or None. Iterative: the document may be as deep as json_max_depth."""
    stack: list[tuple[str, Any]] = [(path, doc)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return where or "(root)"
        if isinstance(v, dict):
            stack.extend((f"{where}/{k}".lstrip("/"), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{where}/{i}".lstrip("/"), x) for i, x in reversed(list(enumerate(v))))
    return None


def loads(raw: bytes | str, what: str, locator: str | None = None, *, finite: bool = False) -> Any:
    """json.loads within the limits; json.JSONDecodeError / UnicodeDecodeError for invalid JSON, as json.loads.

    `finite`: refuse NaN, Infinity and numbers too large for a float (1e999), which the standard library accepts,
    with InputError non_finite_number (formats whose readers do not name such values themselves)."""
    data = check(raw, what, locator)
    text = raw if isinstance(raw, str) else data
    if not finite:
        return json.loads(text)

    def refuse(token: str) -> float:
        raise InputError("non_finite_number", f"{what} holds {token[:40]}: numbers must be finite", locator)

    def number(token: str) -> float:
        v = float(token)
        return v if math.isfinite(v) else refuse(token)

    return json.loads(text, parse_constant=refuse, parse_float=number)
