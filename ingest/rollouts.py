"""Stream rollout files (JSONL or Parquet, format flywheel.rollout/1) into the episodes table, columnar.

A multi-GB file is never loaded whole: JSONL is cut into blocks of whole lines (`block_bytes`, one reused
buffer), each parsed by pyarrow.json with the explicit ROLLOUT schema (no inference, no per-line Python); Parquet
is read with iter_batches. Each block is validated, converted to the episodes schema and hashed with Arrow compute
kernels, then appended with Lake.append (idempotent on episode_id), so memory is bounded by a few blocks, not the
file. Reading+parsing, converting and appending run as three overlapping stages (two threads beside this one).

Bad input: a block that pyarrow cannot parse is bisected until the bad lines are isolated, so a file with one
bad line in 100,000 costs about two extra parses of one block, and the bad line becomes a quarantine row naming
its line number and the error. Semantic problems (missing fields, reward out of range, NaN log-probabilities,
unknown actions) are found with vectorised masks. An unreadable action on the last step of an attempt that
says termination=unreadable_action is not an error: it is a real failed attempt, kept with reward -1.

Episode ids are `schemas.records.Episode.content_hash`, computed here column-wise (`episode_ids`); a test
checks both agree. Actions are parsed column-wise (`parse_actions`): a regex accepts the canonical grammar forms,
whose fields are then read from the strings' bytes; anything else falls back to schemas.actions.parse_action for
that row only.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from core import PIPELINE_VERSION
from core.errors import InputError
from core.iterators import WriteBehind, prefetch
from ingest import safejson
from ingest.formats.rollouts import (
    REWARD_MAX,
    REWARD_MIN,
    REWARD_UNREADABLE,
    ROLLOUT,
    TERMINATIONS,
    check_attempt,
)
from ingest.land import LandResult, Quarantined, land
from schemas.actions import MAX_COORD, ActionError, parse_action
from schemas.tables import EPISODES, STEP
from storage.lake import Lake

SOURCE = "rollout"
#: Bytes of JSONL parsed at once: bounds memory (about 4-6x this at peak) and sets the Delta commit size.
DEFAULT_BLOCK_BYTES = 64 << 20
_PARSE = pj.ParseOptions(explicit_schema=ROLLOUT, unexpected_field_behavior="ignore")
_BISECT_LINES = 32  # below this many lines, diagnose line by line
ProgressFn = Callable[[int, int, int], None]  # (units done, units total, episodes added so far)


# --------------------------------------------------------------------------------------------- actions
_PT = r"'<point>[0-9]{1,5} [0-9]{1,5}</point>'"  # not \d: any script's digits in Rust's regex
_KEY = r"[!-&(-\[\]-~]+"  # printable ASCII without space, quote or backslash
#: The canonical forms format_action writes (no captures: the regex engine decides them with its fast DFA).
_CANONICAL = (
    r"^(?:(?:click|left_double|right_single)\(point=" + _PT + r"\)"
    r"|drag\(start_point=" + _PT + r", end_point=" + _PT + r"\)"
    r"|scroll\(point=" + _PT + r", direction='(?:up|down|left|right)'\)"
    r"|hotkey\(key='" + _KEY + r"(?: " + _KEY + r")*'\)"
    r"|(?:type|finished)\(content='[^'\\]*'\)"
    r"|(?:wait|press_home|press_back)\(\))$"
)
#: In a canonical string the quoted value sits between this prefix and the closing "')".
_VALUE_PREFIX = {"type": "type(content='", "finished": "finished(content='", "hotkey": "hotkey(key='"}
_ACTION_FIELDS = ("action_type", "x", "y", "x2", "y2", "text", "key", "direction")


def _scatter(n: int, idx: np.ndarray, values: pa.Array, type: pa.DataType) -> pa.Array:
    """A length-n array that holds `values` at positions idx and nulls elsewhere."""
    if len(idx) > 1 and (np.diff(idx) < 0).any():  # replace_with_mask fills in position order
        order = np.argsort(idx, kind="stable")
        idx, values = idx[order], values.take(pa.array(order))
    mask = np.zeros(n, dtype=bool)
    mask[idx] = True
    return pc.replace_with_mask(pa.nulls(n, type), pa.array(mask), values.cast(type))


def _digits(data: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, number of digits) of the 1-5 ASCII digits at each byte position (canonical coordinates: always
    followed by a non-digit within the string), numpy over the strings' shared buffer, no per-row Python."""
    # digit by digit over the rows (5 passes of n), not an (n, 6) window of int64 weights: 5-7x faster
    value, n = np.zeros(len(pos), np.int64), np.zeros(len(pos), np.int64)
    live = np.ones(len(pos), dtype=bool)
    for j in range(5):
        d = data[pos + j] - np.uint8(48)  # a non-digit wraps to > 9
        live &= d <= 9
        if not live.any():
            break
        value = np.where(live, value * 10 + d, value)
        n += live
    return value, n


#: The canonical kinds: told apart by their first byte, and press_home / press_back by their 7th.
_KINDS = ("click", "left_double", "right_single", "drag", "scroll", "hotkey", "type", "finished", "wait",
          "press_home", "press_back")  # fmt: skip
_POINT_KINDS = ("click", "left_double", "right_single", "scroll", "drag")
#: Per kind (as in _KINDS), the bytes before a canonical first point's x: "click(point='<point>", ...
_POINT_PREFIX = np.array(
    [len(f"{k}(start_point='<point>" if k == "drag" else f"{k}(point='<point>") for k in _KINDS], dtype=np.int64
)
#: A canonical scroll direction by its first byte.
_DIRECTION_OF_BYTE = np.array([{ord(d[0]): d for d in ("up", "down", "left", "right")}.get(b) for b in range(256)])


def _int_column(n: int, idx: np.ndarray, values: np.ndarray) -> pa.Array:
    """An int32 column of length n with `values` at `idx` and nulls elsewhere."""
    out = np.zeros(n, dtype=np.int32)
    out[idx] = values
    mask = np.ones(n, dtype=bool)
    mask[idx] = False
    return pa.array(out, mask=mask)


def parse_actions(actions: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray, list[str | None]]:
    """Parse a column of action strings: (parsed field columns, readable mask, error message per row or None).

    Canonical forms are recognised by one capture-free regex pass (polars). Their layout is then fixed, so the kind
    comes from the first byte(s), the points from digit runs at known offsets (numpy over the strings' buffer) and
    text and keys from slices. Everything else (extra spaces, double quotes, escapes, garbage) goes through
    parse_action one row at a time, so the result always equals parse_action's.
    """
    import polars as pl

    actions = pc.cast(actions, pa.string())
    if isinstance(actions, pa.ChunkedArray):
        actions = actions.combine_chunks()
    n = len(actions)
    # polars (Rust's regex) decides the grammar in 0.6x the time of Arrow's RE2 kernel (validators/structural.py)
    ok = pl.Series(actions).str.contains(_CANONICAL).fill_null(False).to_numpy().astype(bool)
    off = np.frombuffer(actions.buffers()[1], dtype=np.int32)[actions.offset : actions.offset + n + 1].astype(np.int64)
    raw = actions.buffers()[2]
    data = np.frombuffer(raw, dtype=np.uint8) if raw is not None and raw.size else np.zeros(1, np.uint8)
    start = off[:-1]
    ok_rows = np.flatnonzero(ok)
    first = data[start[ok_rows]] if len(ok_rows) else np.zeros(0, np.uint8)
    code = np.full(n, -1, dtype=np.int8)  # index into _KINDS; -1: not canonical (the fallback decides)
    for i, k in enumerate(_KINDS[:-2]):
        code[ok_rows[first == ord(k[0])]] = i
    press = ok_rows[first == ord("p")]  # "press_home()" / "press_back()": 12 bytes, so byte 6 is inside
    code[press] = np.where(data[start[press] + 6] == ord("h"), _KINDS.index("press_home"), _KINDS.index("press_back"))
    kind = pa.DictionaryArray.from_arrays(pa.array(code, mask=code < 0), pa.array(_KINDS)).cast(pa.string())

    def rows(*names: str) -> np.ndarray:
        wanted = np.zeros(len(_KINDS) + 1, dtype=bool)  # the last entry answers code -1 (not canonical)
        wanted[[_KINDS.index(k) for k in names]] = True
        return np.flatnonzero(wanted[code])

    # points: "<kind>(point='<point>X Y</point>'..." and "drag(start_point='<point>X Y</point>', end_point=..."
    cols: dict[str, pa.Array] = {"action_type": kind}
    xs, ys, x2s, y2s, dirs = (np.zeros(0, np.int64),) * 5
    pts = rows(*_POINT_KINDS)
    pos = start[pts] + _POINT_PREFIX[code[pts]]
    if len(pts):
        xs, nx = _digits(data, pos)
        ys, ny = _digits(data, pos + nx + 1)
        after = pos + nx + 1 + ny + len("</point>', ")  # the next argument
    cols["x"] = _int_column(n, pts, xs)
    cols["y"] = _int_column(n, pts, ys)
    is_drag = code[pts] == _KINDS.index("drag") if len(pts) else np.zeros(0, bool)
    drag = pts[is_drag]
    if len(drag):
        p2 = after[is_drag] + len("end_point='<point>")
        x2s, n2 = _digits(data, p2)
        y2s, _ = _digits(data, p2 + n2 + 1)
    cols["x2"] = _int_column(n, drag, x2s)
    cols["y2"] = _int_column(n, drag, y2s)
    is_scroll = code[pts] == _KINDS.index("scroll") if len(pts) else np.zeros(0, bool)
    sc = pts[is_scroll]
    if len(sc):
        dirs = data[after[is_scroll] + len("direction='")]
    cols["direction"] = _scatter(n, sc, pa.array(_DIRECTION_OF_BYTE[dirs], pa.string()), pa.string())
    texts = []
    for k in ("type", "finished"):
        idx = rows(k)
        texts.append((idx, pc.utf8_slice_codeunits(actions.take(pa.array(idx)), len(_VALUE_PREFIX[k]), -2)))
    idx = np.concatenate([t[0] for t in texts])
    cols["text"] = _scatter(n, idx, pa.concat_arrays([t[1] for t in texts]), pa.string())
    hk = rows("hotkey")
    cols["key"] = _scatter(
        n, hk, pc.utf8_slice_codeunits(actions.take(pa.array(hk)), len(_VALUE_PREFIX["hotkey"]), -2), pa.string()
    )
    # parse_action refuses coordinates above MAX_COORD: let it say why
    ok[pts[(xs > MAX_COORD) | (ys > MAX_COORD)]] = False
    ok[drag[(x2s > MAX_COORD) | (y2s > MAX_COORD)]] = False
    errors: list[str | None] = [None] * n
    undecided = np.flatnonzero(~ok)
    if len(undecided):
        fixes: dict[str, list[Any]] = {f: [] for f in _ACTION_FIELDS}
        texts_ = actions.take(pa.array(undecided)).to_pylist()
        for i, s in zip(undecided, texts_, strict=True):
            try:
                a = parse_action(s)
            except ActionError as e:
                errors[i] = str(e)
                for f in _ACTION_FIELDS:
                    fixes[f].append(None)
                continue
            ok[i] = True
            for f, v in zip(_ACTION_FIELDS, (a.kind, a.x, a.y, a.x2, a.y2, a.text, a.key, a.direction), strict=True):
                fixes[f].append(v)
        use_fix = np.zeros(n, dtype=bool)
        use_fix[undecided] = True
        fix_mask = pa.array(use_fix)
        for f in _ACTION_FIELDS:  # the fallback's answer replaces the vector one on those rows
            cols[f] = pc.replace_with_mask(cols[f], fix_mask, pa.array(fixes[f], type=cols[f].type))
    bad = ~ok
    if bad.any():
        bad_mask = pa.array(bad)
        for f in _ACTION_FIELDS:
            cols[f] = pc.if_else(bad_mask, pa.scalar(None, cols[f].type), cols[f])
    return cols, ok, errors


# ------------------------------------------------------------------------------------------- episode ids
def episode_ids(
    source: pa.Array,
    session_id: pa.Array,
    task_id: pa.Array,
    instruction: pa.Array,
    attempt: pa.Array,
    group_id: pa.Array,
    step_offsets: pa.Array,
    step_action: pa.Array,
    step_thought: pa.Array,
    step_screenshot_sha256: pa.Array,
) -> pa.Array:
    """Episode.content_hash for many episodes at once: the hashed bytes are built with Arrow string kernels;
    only the final sha256 runs per episode (one C call each), never per step."""

    def s(a: pa.Array) -> pa.Array:
        return pc.fill_null(pc.cast(a, pa.large_string()), "")

    def L(v: str) -> pa.Scalar:
        return pa.scalar(v, pa.large_string())

    attempt_s = pc.fill_null(pc.cast(attempt, pa.large_string()), "None")  # str(None), as Episode does
    header = pc.binary_join_element_wise(
        s(source), s(session_id), s(task_id), s(instruction), attempt_s, s(group_id), L(""), L("\x1f")
    )
    sha_end = (
        L("\x1d")
        if step_screenshot_sha256.null_count == len(step_screenshot_sha256)
        else pc.binary_join_element_wise(s(step_screenshot_sha256), L("\x1d"), L(""))
    )
    per_step = pc.binary_join_element_wise(s(step_action), s(step_thought), sha_end, L("\x1e"))
    # steps are contiguous per episode, so an episode's step bytes are one slice of per_step's data buffer
    h_off, h_data = _offsets_and_data(header)
    p_off, p_data = _offsets_and_data(per_step)
    bounds = p_off[np.asarray(pc.cast(step_offsets, pa.int64()))]
    sha = hashlib.sha256

    def one(h0: int, h1: int, p0: int, p1: int) -> str:
        h = sha(h_data[h0:h1])
        h.update(p_data[p0:p1])
        return h.hexdigest()[:32]

    hl, pl = h_off.tolist(), bounds.tolist()
    return pa.array(list(map(one, hl[:-1], hl[1:], pl[:-1], pl[1:])), type=pa.string())


def _offsets_and_data(a: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, memoryview]:
    """(offsets, data) of a large_string array, zero-copy."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    a = a.cast(pa.large_string())
    off = np.frombuffer(a.buffers()[1], dtype=np.int64)[a.offset : a.offset + len(a) + 1]
    data = a.buffers()[2]
    return off, memoryview(data if data is not None else b"")


# ---------------------------------------------------------------------------------------- conversion
@dataclass
class Converted:
    episodes: pa.Table  # episodes schema
    quarantined: list[Quarantined] = field(default_factory=list)
    n_steps: int = 0


def _const(value: Any, n: int, type: pa.DataType = pa.string()) -> pa.Array:
    return pa.repeat(pa.scalar(value, type), n)


def _np(a: pa.Array | pa.ChunkedArray, fill: Any) -> np.ndarray:
    return np.asarray(pc.fill_null(a, fill).to_numpy(zero_copy_only=False))


def convert(
    t: pa.Table,
    lines: np.ndarray,
    *,
    landed_uri: str,
    round: int = 0,
    locator: str = "line",
    file_session: str | None = None,
    now: datetime | None = None,
) -> Converted:
    """Rollout rows (ROLLOUT schema) -> episodes rows, column-wise; rows that break a rule -> Quarantined.

    `lines[i]` is the line (or row) number of t's row i, for quarantine locators and the episode's meta. A table of
    several chunks (pyarrow's JSON reader gives one per 16 MiB it parsed) is converted chunk by chunk and the results
    put side by side (zero-copy), not combined first: combining copied every byte of the block once more (5% of an
    ingest's CPU).
    """
    now = now or datetime.now(UTC)  # one time for the whole block
    kw = {"landed_uri": landed_uri, "round": round, "locator": locator, "file_session": file_session, "now": now}
    batches = t.to_batches()
    if len(batches) <= 1 or t.num_rows < 256 * len(batches):  # many small pieces (a bisected block): combine
        return _convert_chunk(t.combine_chunks(), lines, **kw)
    parts, row0 = [], 0
    for b in batches:
        parts.append(_convert_chunk(pa.Table.from_batches([b]), lines[row0 : row0 + b.num_rows], **kw))
        row0 += b.num_rows
    return Converted(
        pa.concat_tables([c.episodes for c in parts]),
        [q for c in parts for q in c.quarantined],
        sum(c.n_steps for c in parts),
    )


def _convert_chunk(
    t: pa.Table,
    lines: np.ndarray,
    *,
    landed_uri: str,
    round: int,
    locator: str,
    file_session: str | None,
    now: datetime,
) -> Converted:
    """convert() of a table whose columns are one chunk each."""
    n = t.num_rows
    steps = t.column("steps").chunk(0) if t.column("steps").num_chunks else pa.array([], ROLLOUT.field("steps").type)
    steps = steps.cast(ROLLOUT.field("steps").type) if not steps.type.equals(ROLLOUT.field("steps").type) else steps
    problem: list[tuple[str, str] | None] = [None] * n

    def flag(mask: np.ndarray, code: str, msg: Callable[[int], str]) -> None:
        for i in np.flatnonzero(mask):
            if problem[i] is None:
                problem[i] = (code, msg(int(i)))

    # required fields
    for name in ("task_id", "group_id", "attempt", "policy_version", "instruction", "steps", "termination"):
        flag(
            _np(t.column(name).is_null(), False), "missing_field", lambda i, name=name: f"missing required field {name}"
        )
    flag(_np(pc.less(t.column("attempt"), 0), False), "wrong_type", lambda i: "attempt must be a non-negative integer")
    term = t.column("termination")
    flag(
        ~_np(pc.is_in(term, value_set=pa.array(TERMINATIONS)), True),
        "bad_termination",
        lambda i: f"termination {term[i].as_py()!r} is not one of {', '.join(TERMINATIONS)}",
    )
    reward = t.column("reward")
    in_range = pc.and_(pc.greater_equal(reward, REWARD_MIN), pc.less_equal(reward, REWARD_MAX))  # NaN -> false
    flag(
        ~_np(in_range, True),
        "reward_out_of_range",
        lambda i: f"reward {reward[i].as_py()!r} is outside [{REWARD_MIN:g}, {REWARD_MAX:g}]",
    )

    # steps, flattened: one row per step, with its episode index
    n_steps_arr = _np(pc.list_value_length(steps), 0).astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_steps_arr, out=offsets[1:])
    flat = pc.list_flatten(steps)
    ep_of_step = np.repeat(np.arange(n, dtype=np.int64), n_steps_arr)
    sf = {name: flat.field(name) for name in ROLLOUT.field("steps").type.value_type.names}
    missing_action = _np(sf["action"].is_null(), False)
    bad = np.zeros(n, dtype=bool)
    bad[ep_of_step[missing_action]] = True
    flag(bad, "missing_field", lambda i: "a step has no action")

    # NaN / infinite log-probabilities
    lp_sum = sf["logprob_sum"]
    bad_step = ~_np(pc.is_finite(lp_sum), True)
    tok = sf["token_logprobs"]
    tok_vals = pc.list_flatten(tok)
    if len(tok_vals):
        tok_bad = ~_np(pc.is_finite(tok_vals), True)
        if tok_bad.any():
            tok_step = np.asarray(pc.list_parent_indices(tok).to_numpy())
            bad_step[tok_step[tok_bad]] = True
    bad = np.zeros(n, dtype=bool)
    bad[ep_of_step[bad_step]] = True
    flag(bad, "nan_logprob", lambda i: "log-probabilities must be finite numbers (NaN or infinity found)")

    # actions: only the last step of an unreadable_action attempt may fail to parse
    parsed, readable, errors = parse_actions(pc.fill_null(sf["action"], ""))
    is_last = np.zeros(len(ep_of_step), dtype=bool)
    is_last[offsets[1:][n_steps_arr > 0] - 1] = True
    unreadable_term = _np(pc.equal(term, "unreadable_action"), False)
    allowed = is_last & unreadable_term[ep_of_step]
    bad_action_steps = np.flatnonzero(~readable & ~allowed & ~missing_action)
    first_bad: dict[int, int] = {}
    for s in bad_action_steps:
        first_bad.setdefault(int(ep_of_step[s]), int(s))
    for i, s in first_bad.items():
        if problem[i] is None:
            err = errors[s] or "unreadable action"
            code = "unknown_action_kind" if "unknown action kind" in err else "bad_action"
            problem[i] = (
                code,
                f"step {s - offsets[i]}: {err} (only the last step of an unreadable_action attempt may be unreadable)",
            )
    # unreadable_action attempts score -1 (UI-TARS-2) and did not pass
    r_np = _np(reward, np.nan)
    passed_np = _np(t.column("passed"), False)
    mismatch = unreadable_term & ((~np.isnan(r_np) & (r_np != REWARD_UNREADABLE)) | passed_np)
    flag(
        mismatch,
        "reward_mismatch",
        lambda i: f"termination unreadable_action must have reward {REWARD_UNREADABLE:g} and passed false",
    )

    good = np.array([p is None for p in problem], dtype=bool)
    quarantined = [
        Quarantined(
            SOURCE,
            landed_uri,
            p[0],
            f"{locator} {int(lines[i])}: {p[1]}",
            locator=f"{locator} {int(lines[i])}",
            round=round,
        )
        for i, p in enumerate(problem)
        if p is not None
    ]

    # ---- build episodes for the good rows
    all_good = bool(good.all())
    good_steps = good[ep_of_step] if len(ep_of_step) else np.zeros(0, dtype=bool)
    sidx = pa.array(np.flatnonzero(good_steps))
    tg = t if all_good else t.take(pa.array(np.flatnonzero(good)))  # the common case copies nothing
    ng = tg.num_rows
    g_offsets = np.zeros(ng + 1, dtype=np.int64)
    np.cumsum(n_steps_arr[good], out=g_offsets[1:])
    g_ep_of_step = np.repeat(np.arange(ng, dtype=np.int64), n_steps_arr[good])
    step_index = (np.arange(len(g_ep_of_step), dtype=np.int64) - g_offsets[g_ep_of_step]).astype(np.int32)

    def sc(name: str) -> pa.Array:
        return sf[name] if all_good else sf[name].take(sidx)

    tok_g = sc("token_logprobs")
    lp = sc("logprob_sum")
    if len(tok_g) and lp.null_count:  # logprob_sum defaults to the sum of the token log-probabilities
        need = np.flatnonzero(_np(pc.and_(lp.is_null(), tok_g.is_valid()), False))
        if len(need):
            tok_need = tok_g.take(pa.array(need))
            sums = np.bincount(
                np.asarray(pc.list_parent_indices(tok_need).to_numpy()),
                weights=_np(pc.list_flatten(tok_need), 0.0),
                minlength=len(need),
            )
            lp = pc.coalesce(lp, _scatter(len(lp), need, pa.array(sums), pa.float64()))
    thought = pc.fill_null(sc("thought"), "")
    step_cols = {
        "index": pa.array(step_index, pa.int32()),
        "t_start": sc("t_start"),
        "t_end": sc("t_end"),
        "thought": thought,
        "raw_thought": pa.nulls(len(sidx), pa.string()),
        "thought_flag": pa.nulls(len(sidx), pa.string()),
        "action": sc("action"),
        **{f: parsed[f] if all_good else parsed[f].take(sidx) for f in _ACTION_FIELDS},
        "observation": sc("observation"),
        "screenshot_uri": sc("screenshot_uri"),
        "screenshot_sha256": sc("screenshot_sha256"),
        "reward": sc("reward"),
        "logprob_sum": lp,
        "token_logprobs": tok_g,
    }
    arrays = [step_cols[f.name] if f.name in step_cols else pa.nulls(len(sidx), f.type) for f in STEP]
    arrays = [a.cast(f.type) if not a.type.equals(f.type) else a for a, f in zip(arrays, STEP, strict=True)]
    step_struct = pa.StructArray.from_arrays(arrays, fields=list(STEP))
    steps_list = pa.ListArray.from_arrays(pa.array(g_offsets.astype(np.int32)), step_struct)

    run_id = tg.column("run_id")
    session_id = pc.coalesce(run_id, pc.binary_join_element_wise("rollout:", tg.column("policy_version"), ""))
    source = _const(SOURCE, ng)
    ids = episode_ids(
        source,
        session_id,
        tg.column("task_id"),
        tg.column("instruction"),
        tg.column("attempt"),
        tg.column("group_id"),
        pa.array(g_offsets),
        step_cols["action"],
        thought,
        step_cols["screenshot_sha256"],
    )
    term_g = tg.column("termination")
    unread_g = pc.equal(term_g, "unreadable_action")
    last_text, last_kind = step_cols["text"], step_cols["action_type"]
    last_pos = pa.array(np.maximum(g_offsets[1:] - 1, 0))
    has_steps = pa.array(g_offsets[1:] > g_offsets[:-1])
    if len(sidx):
        from_last = pc.if_else(
            pc.and_(has_steps, pc.equal(last_kind.take(last_pos), "finished")),
            last_text.take(last_pos),
            pa.scalar(None, pa.string()),
        )
    else:
        from_last = pa.nulls(ng, pa.string())
    meta_prefix = json.dumps({"file": file_session or landed_uri})[:-1] + f', "{locator}": '
    meta = pc.binary_join_element_wise(meta_prefix, pc.cast(pa.array(lines[good]), pa.string()), "}", "")
    cols = {
        "episode_id": ids,
        "session_id": session_id,
        "source": source,
        "round": pa.array(np.full(ng, round, dtype=np.int32)),
        "task_id": tg.column("task_id"),
        "task_family": tg.column("task_family"),
        "difficulty": tg.column("difficulty"),
        "instruction": tg.column("instruction"),
        "app": tg.column("app"),
        "platform": tg.column("platform"),
        "screen_width": tg.column("screen_width"),
        "screen_height": tg.column("screen_height"),
        "group": _const("model", ng),
        "policy_version": tg.column("policy_version"),
        "group_id": tg.column("group_id"),
        "attempt": tg.column("attempt"),
        "reference_answer": tg.column("reference_answer"),
        "final_answer": pc.coalesce(tg.column("final_answer"), from_last),
        "outcome": term_g,
        "env_reward": pc.if_else(unread_g, REWARD_UNREADABLE, tg.column("reward")),
        "env_passed": pc.if_else(unread_g, False, tg.column("passed")),
        "n_steps": pa.array(n_steps_arr[good].astype(np.int32)),
        "steps": steps_list,
        "pipeline_version": _const(PIPELINE_VERSION, ng),
        "ingested_at": _const(now, ng, EPISODES.field("ingested_at").type),
        "meta": meta,
    }
    arrays = []
    for f in EPISODES:
        a = cols.get(f.name)
        if a is None:
            a = pa.nulls(ng, f.type)
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        arrays.append(a if a.type.equals(f.type) else a.cast(f.type))
    return Converted(pa.Table.from_arrays(arrays, schema=EPISODES), quarantined, int(len(sidx)))


# ------------------------------------------------------------------------------------------ JSONL blocks
def _diagnose_line(raw: bytes) -> tuple[str, str]:
    """Why one line cannot be read: invalid JSON, not an object, a rule of the format, or a wrong type."""
    try:
        d = safejson.loads(raw, "the line")  # stdlib accepts NaN, so NaN log-probs are named as such below
    except InputError as e:  # too deep or too large
        return e.code, e.message
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return "invalid_json", f"invalid JSON: {e}"
    if not isinstance(d, dict):
        return "wrong_type", f"a line must be a JSON object, got {type(d).__name__}"
    problem = check_attempt(d)
    if problem:
        return problem
    try:
        pj.read_json(io.BytesIO(raw), parse_options=_PARSE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        return "wrong_type", str(e).removeprefix("JSON parse error: ")
    return "unreadable", "line could not be parsed"


#: pyarrow's JSON reader (26.0) kills the process (segfault) on a block whose first value is a bare `null`, and
#: passes invalid UTF-8 into string columns (both found by tests/hostile fuzzing). Such lines are never rollouts, so a
#: block holding one takes the bisecting path, where the line is quarantined. Cheap scans (about 50 ms per 64 MB).
_BARE_NULL_FIRST = re.compile(rb"[ \t\r\n]*null")
_BARE_NULL_LINE = re.compile(rb"\n[ \t\r]*null")


def _read(data: bytes | bytearray | memoryview) -> pa.Table:
    if _BARE_NULL_FIRST.match(data) or _BARE_NULL_LINE.search(data):
        raise pa.ArrowInvalid("a line is a bare null, not a JSON object")
    buf = pa.py_buffer(data)
    # pyarrow's JSON reader lets invalid UTF-8 into string columns, where it breaks every later reader: the block is
    # validated as one Arrow string (zero-copy; a third of the time of decoding it into a Python str)
    one = pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], dtype=np.int64)), buf)
    try:
        one.validate(full=True)
    except pa.ArrowInvalid:
        raise pa.ArrowInvalid("a line is not valid UTF-8") from None
    return pj.read_json(pa.BufferReader(buf), parse_options=_PARSE, read_options=pj.ReadOptions(block_size=16 << 20))


def _line_numbers(
    data: bytes | bytearray | memoryview, first_line: int, n_rows: int, n_newlines: int | None = None
) -> np.ndarray:
    """Line number of each parsed row; pyarrow skips blank lines, so count them only when there are some."""
    n_newlines = bytes(data).count(b"\n") if n_newlines is None else n_newlines
    n_lines = n_newlines + (0 if data[-1:] == b"\n" else 1)
    if n_lines == n_rows:
        return np.arange(first_line, first_line + n_rows, dtype=np.int64)
    nums = [first_line + i for i, ln in enumerate(bytes(data).split(b"\n")) if ln.strip()]
    return np.asarray(nums[:n_rows], dtype=np.int64)


def parse_block(
    data: bytes | bytearray | memoryview,
    first_line: int,
    landed_uri: str,
    round: int = 0,
    n_newlines: int | None = None,
) -> tuple[pa.Table, np.ndarray, list[Quarantined]]:
    """Parse whole JSONL lines -> (rows, their line numbers, quarantined lines).

    On a parse error the block is bisected to isolate the bad lines; the good halves still parse in bulk.
    """
    try:
        t = _read(data)
        return t, _line_numbers(data, first_line, t.num_rows, n_newlines), []
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    parts: list[tuple[pa.Table, np.ndarray]] = []
    bad: list[Quarantined] = []
    lines = bytes(data).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()

    def go(lo: int, hi: int) -> None:
        chunk = b"\n".join(lines[lo:hi]) + b"\n"
        if hi - lo > _BISECT_LINES:
            try:
                t = _read(chunk)
                parts.append((t, _line_numbers(chunk, first_line + lo, t.num_rows)))
                return
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                mid = (lo + hi) // 2
                go(lo, mid)
                go(mid, hi)
                return
        for i in range(lo, hi):
            raw = lines[i]
            if not raw.strip():
                continue
            try:
                t = _read(raw + b"\n")
                parts.append((t, np.array([first_line + i], dtype=np.int64)))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                code, msg = _diagnose_line(raw)
                n = first_line + i
                bad.append(Quarantined(SOURCE, landed_uri, code, f"line {n}: {msg}", locator=f"line {n}", round=round))

    go(0, len(lines))
    tables = [p[0] for p in parts if p[0].num_rows]
    t = pa.concat_tables(tables) if tables else ROLLOUT.empty_table()
    nums = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    return t, nums, bad


def iter_jsonl_blocks(
    f: io.BufferedIOBase, block_bytes: int, hasher: Any = None
) -> Iterator[tuple[int, memoryview, int]]:
    """Yield (first line number, whole lines, number of newlines) blocks of at most about block_bytes, each ending at
    a newline (or at the end of the file), read once into one buffer that every block reuses: no copy of a block,
    no fresh pages per block. A block is valid until the next one is asked for (the caller parses it first)."""
    buf = bytearray(block_bytes)
    view = memoryview(buf)
    line, carry = 1, 0  # carry: bytes of an unfinished last line, moved to the buffer's start
    while True:
        n = f.readinto(view[carry:]) or 0
        if hasher is not None and n:
            hasher.update(view[carry : carry + n])
        end = carry + n
        if not end:
            return
        cut = end if not n else buf.rfind(b"\n", 0, end) + 1  # at the end of the file: what is left
        if not cut:  # a line longer than the buffer: a buffer twice as big (the old one may still be referenced)
            buf = bytearray(2 * len(buf))
            buf[:end] = view[:end]
            view, carry = memoryview(buf), end
            continue
        n_lines = buf.count(b"\n", 0, cut)
        yield line, view[:cut], n_lines
        line += n_lines
        carry = end - cut
        view[:carry] = bytes(view[cut:end])


# -------------------------------------------------------------------------------------------- ingest
@dataclass
class RolloutIngest:
    """What ingesting one file did."""

    path: str
    session_id: str
    result: LandResult
    n_steps: int
    quarantine_codes: dict[str, int]


def _file_session(sha: str) -> str:
    return f"rollouts-{sha[:24]}"


def ingest_rollout_file(
    lake: Lake,
    path: str | Path,
    *,
    round: int = 0,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    parquet_batch_rows: int = 8192,
    progress: ProgressFn | None = None,
) -> RolloutIngest:
    """Stream one rollout file (.jsonl / .ndjson / .parquet) into the lake; return counts.

    Appends per block (idempotent on episode_id), quarantine rows for unreadable attempts, and one sessions row
    for the file (status landed, content hash, counts, quarantine reasons) written last. Three stages share the
    cores: block k+2 is read and parsed (a thread), k+1 converted (here) and k landed (a thread, in order).
    """
    path = Path(path)
    uri = str(path)
    res = LandResult()
    codes: dict[str, int] = {}
    n_steps = 0
    hasher = hashlib.sha256()
    total = path.stat().st_size

    def landed(r: tuple[LandResult, int, int]) -> None:
        """A block is in: count it and report progress (units done, units total, episodes added so far)."""
        result, done, units = r
        res.__iadd__(result)
        if progress and units:
            progress(done, units, res.episodes_added)

    def land_block(
        episodes: pa.Table | None, q: list[Quarantined], done: int, units: int
    ) -> tuple[LandResult, int, int]:
        return land(lake, episodes, None, q), done, units

    with WriteBehind("rollout-write", on_done=landed) as writer:

        def land_part(
            t: pa.Table, lines: np.ndarray, extra_q: list[Quarantined], done: int, units: int, locator: str
        ) -> None:
            nonlocal n_steps
            conv = convert(t, lines, landed_uri=uri, round=round, locator=locator)
            q = extra_q + conv.quarantined
            for item in q:
                codes[item.error_type] = codes.get(item.error_type, 0) + 1
            writer.submit(land_block, conv.episodes, q, done, units)
            n_steps += conv.n_steps

        if path.suffix == ".parquet":
            with path.open("rb") as fh:  # hash the file once, in blocks
                for buf in iter(lambda: fh.read(1 << 24), b""):
                    hasher.update(buf)
            pf = pq.ParquetFile(path)
            total_rows, row0 = pf.metadata.num_rows, 1
            names = [n for n in ROLLOUT.names if n in pf.schema_arrow.names]
            for batch in pf.iter_batches(batch_size=parquet_batch_rows, columns=names):
                t = _conform_parquet(pa.Table.from_batches([batch]), uri, round)
                if isinstance(t, Quarantined):
                    codes[t.error_type] = codes.get(t.error_type, 0) + 1
                    writer.submit(land_block, None, [t], 0, 0)
                    break
                land_part(t, np.arange(row0, row0 + t.num_rows), [], row0 + t.num_rows - 1, total_rows, "row")
                row0 += t.num_rows
        else:
            done = 0
            with path.open("rb") as fh:

                def parsed() -> Iterator[tuple[int, tuple[pa.Table, np.ndarray, list[Quarantined]]]]:
                    for first_line, data, n_newlines in iter_jsonl_blocks(fh, block_bytes, hasher):
                        yield len(data), parse_block(data, first_line, uri, round, n_newlines)

                with prefetch(parsed(), "rollout-read") as blocks:
                    for size, (t, lines, bad) in blocks:
                        done += size
                        land_part(t, lines, bad, done, total, "line")
        writer.drain()  # every block is in before the session row says the file landed

    sha = hasher.hexdigest()
    sid = _file_session(sha)
    session = {
        "session_id": sid,
        "source": SOURCE,
        "group": "model",
        "status": "landed",
        "landed_uri": uri,
        "content_sha256": sha,
        "round": round,
        "n_episodes": res.episodes_seen,
        "n_actions": n_steps,
        "problems": [f"{k} x{v}" for k, v in sorted(codes.items())],
        "pipeline_version": PIPELINE_VERSION,
        "ingested_at": datetime.now(UTC),
    }
    res.__iadd__(land(lake, None, [session], None))
    return RolloutIngest(uri, sid, res, n_steps, codes)


def _conform_parquet(t: pa.Table, uri: str, round: int) -> pa.Table | Quarantined:
    """Cast a Parquet batch to ROLLOUT (missing columns as nulls); a type that cannot be cast quarantines the file."""
    cols = []
    for f in ROLLOUT:
        if f.name not in t.column_names:
            cols.append(pa.nulls(t.num_rows, f.type))
            continue
        try:
            cols.append(t.column(f.name).cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            return Quarantined(
                SOURCE,
                uri,
                "wrong_type",
                f"column {f.name}: {t.column(f.name).type} is not {f.type}: {e}",
                locator="file",
                round=round,
            )
    return pa.Table.from_arrays(cols, schema=ROLLOUT)
