"""Fuzz targets shared by tests/hostile/test_fuzz.py (short, derandomized, in CI) and bench/bench_fuzz.py (minutes).

Each target feeds one reader a hostile input built by mutating a valid one, and checks the contract every reader
has: it returns (episodes and/or quarantine records with a code and a message) and never raises, except the action
parser, whose contract is ActionError (a ValueError) for anything it cannot read. A quarantine with the catch-all
code `internal_error` counts as a crash: it means an unforeseen exception inside our code.

Mutations are JSON-aware (delete a key, replace a value by one of another type, huge numbers, NaN, deep nesting,
odd unicode) and byte-level (flip, insert, truncate, invalid UTF-8), applied to valid seeds. Three sweeps cover
whole classes of fields at once: `deep_json` nests one value up to 5,000 levels (past Python's recursion limit),
`markup_json` puts Rich markup (`[/x]`, `[red]`, `[link=...]`, backslashes) into every string field of a
document, `non_finite_json` puts NaN, Infinity, -Infinity or 1e999 into every numeric field; file names in
bundles get markup too. Every quarantine record is also printed the way the CLI prints it, so a MarkupError from
input-derived text counts as a crash.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

# --------------------------------------------------------------------------------------------- strategies
WEIRD_TEXT = st.sampled_from(["", " ", "\x00", "\u202e", "..", "../../etc/passwd", "/etc/passwd", "C:\\x", "💥" * 50,
                              "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"), "a" * 10_000,
                              "click(point='<point>1 2</point>')", "NaN", "-0", "1e309", "\\", "'", '"', "<point>"])  # fmt: skip
JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40), WEIRD_TEXT,
)  # fmt: skip
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


MARKUP = st.sampled_from(["[/x]", "[/]", "[red]red[/red]", "[link=https://evil.example]x[/link]", "[bold", "\\", "x\\",
                          "\\[/x]", "[[/x]]", ":warning:", "[#ff0000]", "[@click=app.quit]q[/]", "]", "["])  # fmt: skip
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999")
_SENTINEL = "\u0001fuzz-%d\u0001"


def dumps_with(doc: Any, raw: dict[str, str]) -> str:
    """json.dumps(doc), then each sentinel string (see `_SENTINEL`) replaced by its raw JSON text: how a document
    gets values json.dumps cannot write (5,000 levels deep, `1e999`)."""
    text = json.dumps(doc)
    for sentinel, value in raw.items():
        text = text.replace(json.dumps(sentinel), value)
    return text


def _leaves(doc: Any, kind: tuple[type, ...], prefix: tuple = ()) -> list[tuple]:
    return [
        p for p in _paths(doc, prefix) if p and isinstance(_get(doc, p), kind) and not isinstance(_get(doc, p), bool)
    ]


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _set(doc: Any, path: tuple, value: Any) -> None:
    _get(doc, path[:-1])[path[-1]] = value


@st.composite
def deep_json(draw: Any, doc: Any) -> str:
    """`doc` as JSON text with one value (or the whole document) nested 50..5,000 levels deep."""
    doc = json.loads(json.dumps(doc))
    n = draw(st.sampled_from([50, 65, 200, 1_000, 1_500, 5_000]))
    path = draw(st.sampled_from(_paths(doc)))
    inner = json.dumps(_get(doc, path) if path else 1)
    deep = "[" * n + inner + "]" * n if draw(st.booleans()) else '{"a":' * n + inner + "}" * n
    if not path:
        return deep
    sentinel = _SENTINEL % 0
    _set(doc, path, sentinel)
    return dumps_with(doc, {sentinel: deep})


@st.composite
def markup_json(draw: Any, doc: Any) -> Any:
    """`doc` with Rich markup put into every string field (replacing, prefixing or suffixing it)."""
    doc = json.loads(json.dumps(doc))
    for path in _leaves(doc, (str,)):
        m, v = draw(MARKUP), _get(doc, path)
        _set(doc, path, draw(st.sampled_from([m, m + v, v + m, v + " " + m + " " + v])))
    return doc


@st.composite
def non_finite_json(draw: Any, doc: Any) -> str:
    """`doc` as JSON text with NaN, Infinity, -Infinity or 1e999 in every numeric field (or in one of them)."""
    doc = json.loads(json.dumps(doc))
    paths = _leaves(doc, (int, float))
    if paths and draw(st.booleans()):
        paths = [draw(st.sampled_from(paths))]
    raw = {}
    for i, path in enumerate(paths):
        sentinel = _SENTINEL % i
        raw[sentinel] = draw(st.sampled_from(NON_FINITE))
        _set(doc, path, sentinel)
    return dumps_with(doc, raw)


def hostile_json(doc: Any, max_mutations: int = 3) -> Any:
    """JSON text of `doc` under one of the mutations above."""
    return st.one_of(
        mutated_json(doc, max_mutations).map(json.dumps),
        deep_json(doc),
        markup_json(doc).map(json.dumps),
        non_finite_json(doc),
    )


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_json(draw: Any, doc: Any, max_mutations: int = 3) -> Any:
    """A copy of `doc` with 1..max_mutations edits at random places: delete, replace, retype, wrap, deepen."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, max_mutations))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "wrap", "deep", "add"]))
        if not path:
            if op == "replace":
                doc = draw(JSON_VALUE)
            continue
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(JSON_VALUE)
        elif op == "wrap":
            parent[key] = [parent[key]]
        elif op == "deep":
            v: Any = parent[key]
            for _ in range(draw(st.integers(50, 400))):
                v = [v]
            parent[key] = v
        elif op == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=10))] = draw(JSON_VALUE)
    return doc


@st.composite
def mutated_bytes(draw: Any, data: bytes, max_edits: int = 4) -> bytes:
    b = bytearray(data)
    for _ in range(draw(st.integers(1, max_edits))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "garbage"]))
        i = draw(st.integers(0, max(len(b) - 1, 0)))
        if op == "flip" and b:
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            b[i:i] = draw(st.sampled_from([b"\n", b"\x00", b"\xff\xfe", b'"', b"{", b"]", b"\\u0000", b"\xc3"]))
        elif op == "delete" and b:
            del b[i : i + draw(st.integers(1, 64))]
        elif op == "truncate":
            del b[i:]
        elif op == "garbage":
            b[i:i] = draw(st.binary(max_size=32))
    return bytes(b)


# --------------------------------------------------------------------------------------------- seeds
VALID_ACTIONS = [
    "click(point='<point>10 20</point>')", "left_double(point='<point>0 0</point>')",
    "right_single(point='<point>5 7</point>')", "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
    "hotkey(key='ctrl c')", "type(content='hello \\'world\\'\\n')", "scroll(point='<point>9 9</point>', direction='down')",
    "wait()", "finished(content='done')", "press_home()", "press_back()",
]  # fmt: skip


def rollout_line(i: int = 0) -> dict[str, Any]:
    return {"task_id": f"t{i}", "group_id": "g", "attempt": i, "policy_version": "p", "instruction": "do it",
            "screen_width": 100, "screen_height": 80, "reward": 1.0, "passed": True, "termination": "finished",
            "steps": [{"thought": "a", "action": "click(point='<point>1 2</point>')", "logprob_sum": -1.0, "token_logprobs": [-0.5, -0.5]},
                      {"thought": "b", "action": "finished(content='ok')"}]}  # fmt: skip


def annotation_doc() -> dict[str, Any]:
    return {"format": "flywheel.annotation/1", "session_id": "s-1", "annotator": "alice", "group": "expert",
            "episodes": [{"task_id": "t1", "instruction": "Copy the text", "screen_width": 100, "screen_height": 80,
                          "steps": [{"proposals": [{"thought": "Open File.", "action": "click(point='<point>5 5</point>')", "model_version": "m"}],
                                     "decision": "overridden", "override": {"thought": "Edit, not File.", "action": "click(point='<point>40 5</point>')"}},
                                    {"proposals": [{"thought": "Done.", "action": "finished(content='ok')", "model_version": "m"}],
                                     "decision": "accepted", "accepted_index": 0}]}]}  # fmt: skip


def _png(color: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 20), (color, 40, 90)).save(buf, format="PNG")
    return buf.getvalue()


def bundle_parts() -> dict[str, Any]:
    """A valid transcript-only think-aloud bundle (no ASR), as parts: manifest, event lines, transcript, screenshots."""
    events = [{"t": 1.0, "type": "mouse_down", "x": 10, "y": 10, "button": "left"}, {"t": 1.1, "type": "mouse_up", "x": 10, "y": 10, "button": "left"},
              {"t": 2.0, "type": "key_down", "key": "h"}, {"t": 2.05, "type": "key_up", "key": "h"},
              {"t": 2.1, "type": "key_down", "key": "i"}, {"t": 2.15, "type": "key_up", "key": "i"},
              {"t": 3.0, "type": "wheel", "x": 20, "y": 20, "dx": 0, "dy": -1}]  # fmt: skip
    manifest = {"format": "flywheel.think-aloud/1", "session_id": "fuzz-0001", "instruction": "Type hi", "screen_width": 64,
                "screen_height": 40, "annotator_id": "ann", "group": "novice", "events": "events.jsonl",
                "transcript": "transcript.jsonl", "screenshots": [{"t": 0.5, "file": "screenshots/0000.png"}, {"t": 1.5, "file": "screenshots/0001.png"}]}  # fmt: skip
    transcript = [
        {"t_start": 0.2, "t_end": 0.9, "text": "I click the box."},
        {"t_start": 1.3, "t_end": 1.9, "text": "Now I type hi."},
    ]
    return {
        "manifest": manifest,
        "events": events,
        "transcript": transcript,
        "shots": {"screenshots/0000.png": _png(10), "screenshots/0001.png": _png(200)},
    }


def write_parts(folder: Path, parts: dict[str, Any], raw: dict[str, bytes] | None = None) -> Path:
    """Write a bundle folder from parts; `raw` overrides a file's bytes (name -> bytes)."""
    folder.mkdir(parents=True, exist_ok=True)

    def lines(v: Any) -> bytes:  # a mutation may have turned the list of lines into anything
        return ("".join(json.dumps(e) + "\n" for e in v) if isinstance(v, list) else json.dumps(v)).encode()

    files = {
        "manifest.json": json.dumps(parts["manifest"]).encode(),
        "events.jsonl": lines(parts["events"]),
        "transcript.jsonl": lines(parts["transcript"]),
        **parts["shots"],
        **(raw or {}),
    }
    for name, data in files.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return folder


def zip_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(folder).as_posix())
    return buf.getvalue()


PARTS = bundle_parts()


def _jsonl_with(draw: Any, rows: list[Any], line: Any) -> bytes:
    """JSON lines of `rows` with one line replaced by the text `line` draws (a deep or non-finite row)."""
    i = draw(st.integers(0, len(rows) - 1))
    return "".join((draw(line(r)) if k == i else json.dumps(r)) + "\n" for k, r in enumerate(rows)).encode()


@st.composite
def hostile_bundle(draw):
    """A valid bundle with one part mutated: manifest, events, transcript, a screenshot, raw event bytes, the zip;
    deep nesting, non-finite numbers or markup in a JSON part; markup in its file names. Returns (parts, raw
    overrides, where, the bundle's file or folder name)."""
    parts = json.loads(json.dumps({k: v for k, v in PARTS.items() if k != "shots"}))
    parts["shots"] = dict(PARTS["shots"])
    raw: dict[str, bytes] = {}
    name = draw(st.one_of(st.just("bundle"), MARKUP.map(lambda m: f"b {m.replace('/', '_')} x")))
    where = draw(st.sampled_from(["manifest", "events", "transcript", "shot", "events_bytes", "zip", "deep",
                                  "non_finite", "markup", "names"]))  # fmt: skip
    if where in ("deep", "non_finite"):
        sweep = deep_json if where == "deep" else non_finite_json
        part = draw(st.sampled_from(["manifest.json", "events.jsonl", "transcript.jsonl"]))
        if part == "manifest.json":
            raw[part] = draw(sweep(parts["manifest"])).encode()
        else:
            raw[part] = _jsonl_with(draw, parts[part.removesuffix(".jsonl")], sweep)
    elif where == "markup":
        part = draw(st.sampled_from(["manifest", "events", "transcript"]))
        keep = {k: parts["manifest"][k] for k in ("format", "events", "transcript", "screenshots")}
        parts[part] = draw(markup_json(parts[part]))
        if part == "manifest" and draw(st.booleans()):  # free text only: the files stay where they are
            parts["manifest"].update(keep)
    elif where == "names":  # markup in the file names the manifest points to (and that exist)
        m = parts["manifest"]
        for shot in m["screenshots"]:
            new = f"screenshots/{draw(MARKUP).replace('/', '_')}{shot['file'][-8:]}"
            parts["shots"][new] = parts["shots"].pop(shot["file"])
            shot["file"] = new
        if draw(st.booleans()):
            ev = f"{draw(MARKUP).replace('/', '_')}.jsonl"
            raw[ev] = "".join(json.dumps(e) + "\n" for e in parts["events"]).encode()
            m["events"] = ev
    elif where == "manifest":
        parts["manifest"] = draw(mutated_json(parts["manifest"]))
    elif where == "events":
        parts["events"] = draw(mutated_json(parts["events"]))
    elif where == "transcript":
        parts["transcript"] = draw(mutated_json(parts["transcript"]))
    elif where == "shot":
        raw["screenshots/0001.png"] = draw(mutated_bytes(PARTS["shots"]["screenshots/0001.png"]))
    elif where == "events_bytes":
        raw["events.jsonl"] = draw(mutated_bytes("".join(json.dumps(e) + "\n" for e in PARTS["events"]).encode()))
    return parts, raw, where, name


# --------------------------------------------------------------------------------------------- targets
class Crash(AssertionError):
    """A reader broke its contract on a hostile input."""


OUTCOMES: Counter[tuple[str, str]] = Counter()
"""(target, outcome) -> count over this process: each quarantine code, `refused` / `parsed` for actions. The
benchmark reports it, to show the hostile inputs reached many different checks rather than one early refusal."""


def target_action(s: str) -> None:
    from schemas.actions import ActionError, format_action, parse_action

    try:
        a = parse_action(s)
    except ActionError:
        OUTCOMES["action", "refused"] += 1
        return
    except Exception as e:
        raise Crash(f"parse_action({s[:200]!r}) raised {type(e).__name__}: {e}") from e
    again = parse_action(format_action(a))
    if again != a:
        raise Crash(f"round trip changed {s[:200]!r}: {a} -> {again}")
    OUTCOMES["action", "parsed"] += 1


def print_like_the_cli(name: str, items: list[Any]) -> str:
    """Print quarantine records the way the ingest commands do (a line each, and a table): a MarkupError from
    input-derived text is a crash."""
    from rich.console import Console

    from core.console import data_table, esc

    c = Console(file=io.StringIO(), width=200, emoji=False, color_system=None, highlight=False)
    try:
        for q in items:
            c.print(f"  [yellow]quarantined[/] {esc(q.locator or name)}: {esc(q.error_type)}: {esc(q.error)}")
        c.print(data_table(["bundle", "problems"], [[name, "\n".join(q.error for q in items) or "none"]]))
    except Exception as e:
        raise Crash(f"printing the outcome of {name[:80]!r} raised {type(e).__name__}: {str(e)[:300]}") from e
    return c.file.getvalue()  # type: ignore[attr-defined]


def _check_quarantine(items: list[Any], what: str, name: str = "input") -> None:
    for q in items:
        if not q.error_type or not q.error:
            raise Crash(f"{what}: quarantine record without a reason: {q}")
        if q.error_type == "internal_error":
            raise Crash(f"{what}: unforeseen exception inside the reader: {q.error}")
        OUTCOMES[what, q.error_type] += 1
    print_like_the_cli(name, items)


def target_rollout_block(data: bytes) -> tuple[int, int]:
    """parse_block + convert on hostile JSONL; every non-blank line is an episode or quarantined."""
    import numpy as np

    from ingest.rollouts import convert, parse_block

    try:
        t, lines, bad = parse_block(data, 1, "fuzz.jsonl")
        conv = convert(t, lines, landed_uri="fuzz.jsonl")
    except Exception as e:
        raise Crash(f"rollout reader raised {type(e).__name__}: {str(e)[:300]}") from e
    _check_quarantine(bad + conv.quarantined, "rollouts")
    rows = [ln.strip() for ln in data.split(b"\n") if ln.strip()]
    seen = {q.locator for q in bad + conv.quarantined} | {f"line {int(n)}" for n in np.asarray(lines)}
    one_per_line = all(r.startswith(b"{") and r.endswith(b"}") for r in rows)  # else an object may span lines
    nonblank = len(rows) if one_per_line else min(len(rows), 1)
    if len(seen) < nonblank:
        raise Crash(
            f"rollouts: {nonblank} non-blank line(s) but only {len(seen)} accounted for (episode or quarantine)"
        )
    OUTCOMES["rollouts", "episode"] += conv.episodes.num_rows
    return conv.episodes.num_rows, len(bad) + len(conv.quarantined)


def target_annotation(data: bytes, workdir: Path) -> tuple[int, int]:
    from ingest.annotations import read_session

    p = workdir / "session.json"
    p.write_bytes(data)
    try:
        s = read_session(p, round=0)
    except Exception as e:
        raise Crash(f"annotation reader raised {type(e).__name__}: {str(e)[:300]}") from e
    _check_quarantine(s.quarantined, "annotations")
    if not s.episodes and not s.quarantined and s.session.get("n_episodes") != 0:
        raise Crash("annotations: neither an episode, a quarantine record nor an empty session")
    OUTCOMES["annotations", "episode"] += len(s.episodes)
    return len(s.episodes), len(s.quarantined)


def target_bundle(
    lake: Any,
    parts: dict[str, Any],
    raw: dict[str, bytes] | None,
    as_zip: bytes | None,
    workdir: Path,
    name: str = "bundle",
) -> str:
    """process_input on a hostile bundle folder (or zip bytes) called `name`: an episode or quarantine, never an
    exception, and its outcome prints."""
    from ingest.think_aloud import IngestOptions, process_input

    d = Path(tempfile.mkdtemp(dir=workdir))
    try:
        if as_zip is not None:
            path = d / f"{name}.zip"
            path.write_bytes(as_zip)
        else:
            path = write_parts(d / name, parts, raw)
        try:
            o = process_input(path, lake, round=0, opts=IngestOptions(salt="fuzz"))
        except Exception as e:
            raise Crash(f"process_input raised {type(e).__name__}: {str(e)[:300]}") from e
        _check_quarantine(o.quarantined, "think-aloud", path.name)
        if not o.episodes and not o.quarantined and not o.timings.get("skipped"):
            raise Crash("think-aloud: neither an episode nor a quarantine record")
        OUTCOMES["think-aloud", "episode"] += len(o.episodes)
        return o.quarantined[0].error_type if o.quarantined else "ok"
    finally:
        shutil.rmtree(d, ignore_errors=True)
