"""Exports of the piles for training elsewhere, each a Parquet file the Hugging Face `datasets` library loads.

`flywheel export KIND` writes them for people; the external-command backend (training/backend.py) hands the same
files to a trainer (TRL, verl), so both see one format.

    sft-trl      SFT pile -> TRL conversational rows: `messages` (system, then user/assistant turns, one pair per
                 step; user turns carry the screenshot as an image item) and `images` (PNG/JPEG bytes, in order),
                 with the screenshots' size (`width`, `height`) and `coordinates` (the actions' convention)
    sft-verl     SFT pile -> verl RL parquet, `train.parquet` + `validation.parquet` (split by task hash):
                 data_source, prompt (chat messages, first screen), images, ability, reward_model {style,
                 ground_truth: training/verl_reward.py's}, agent_name (verl's tool agent loop), extra_info {split,
                 index, ..., tools_kwargs for the gui_act tool, the recorded turns}
    ct-text      CT pile -> plain text for language-model training: `text` (+ episode_id, round, reasons)
    preferences  preference_pairs -> (prompt, chosen, rejected) for DPO-style trainers

Each export reads its table at one Delta version (the newest unless given) and records it: in the Parquet file's
schema metadata under b"flywheel" and in the sidecar `flywheel_export.json` (with the row count and the file's
SHA-256). The Hugging Face feature types go in the standard b"huggingface" metadata, so images decode as images.
Rows are in (round, key) order, so the same pile version always gives the same rows in the same order.

Screenshots are read through the lake-relative references of the rows (storage.objects.object_key_of), so any copy
of the lake exports them. A screenshot that is missing is an error naming it and its episode, unless
`allow_missing` (then it is left out and counted).

Coordinates: every action's points are absolute pixels of the stored screenshot (x right, y down, origin top
left), whose size each row carries. A processor that resizes images (Qwen2-VL's rounds 640x400 to 644x392) must
map points the same way: x' = x * W' / width, y' = y * H' / height.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core import PIPELINE_VERSION
from schemas.prompt import PromptConfig, render_answer, render_prompt
from storage.lake import Lake
from storage.objects import object_key_of
from storage.piles import PILES, read_pile
from training.verl_reward import ground_truth

DATA_FILE = "data.parquet"
SIDECAR = "flywheel_export.json"
#: sft-verl's files, one per split (verl's data.train_files / data.val_files).
SPLIT_FILES = {"train": "train.parquet", "validation": "validation.parquet"}
#: The share of tasks in sft-verl's validation split (by task hash, so a task's episodes stay together).
VAL_FRACTION = 0.1
#: The coordinate convention of the exported actions (module docstring).
COORDINATES = "pixel"
#: The verl tool that plays one action in the task's environment (training/verl_tool.py).
GUI_TOOL = "gui_act"
#: The export keeps thoughts whole; clipping is a training-time choice of the consumer.
FULL = PromptConfig(history_full=0, history_max=0, max_thought_words=1_000_000)

SYSTEM_PROMPT = (
    "You are a GUI agent. You are given a task and screenshots of the screen. For each step, think, then act.\n"
    "Answer as:\nThought: ...\nAction: ...\n"
    "Actions: click(point='<point>x y</point>'), left_double(point=...), right_single(point=...), "
    "drag(start_point='<point>x1 y1</point>', end_point='<point>x2 y2</point>'), hotkey(key='ctrl c'), "
    "type(content='...'), scroll(point='<point>x y</point>', direction='down'), wait(), finished(content='...'), "
    "press_home(), press_back()."
)


class ExportError(ValueError):
    """An export that cannot be written as asked (one line)."""


@dataclass(frozen=True)
class ExportResult:
    kind: str
    out_dir: Path
    data_file: Path  # the (train) data file
    sidecar: Path
    table: str
    table_version: int
    rows: int
    images: int
    missing_images: int
    files: dict[str, Path] = field(default_factory=dict)  # split -> file (sft-verl: train and validation)
    split_rows: dict[str, int] = field(default_factory=dict)


@dataclass
class _Ctx:
    lake: Lake
    max_images: int | None
    allow_missing: bool = False
    images: int = 0
    missing: int = 0
    index: int = 0

    def image(self, ref: str | None, episode_id: str, step: int) -> bytes | None:
        """The screenshot's bytes; a missing one is an ExportError naming it, or counted with allow_missing."""
        if not ref:
            return None
        key = object_key_of(ref)
        data = None if key is None else self.lake.objects.get_bytes(key)
        if data is None:
            if not self.allow_missing:
                where = "is not an object of the lake" if key is None else f"is missing from {self.lake.uri}"
                raise ExportError(f"screenshot {key or ref} of episode {episode_id} (step {step}) {where}; restore it "
                                  "or pass --allow-missing to export without it")  # fmt: skip
            self.missing += 1
            return None
        self.images += 1
        return data


def _size(png: bytes | None, ep: dict[str, Any]) -> tuple[int | None, int | None]:
    """The stored screenshot's size (its header only), else the episode's screen size."""
    if png is not None:
        from PIL import Image

        return Image.open(io.BytesIO(png)).size
    return ep.get("screen_width"), ep.get("screen_height")


def _features(kind: str):  # noqa: ANN202 - datasets.Features
    from datasets import Features, Image, List, Value

    text_item = {"type": Value("string"), "text": Value("string")}
    size = {"width": Value("int32"), "height": Value("int32"), "coordinates": Value("string")}
    if kind == "sft-trl":
        return Features(
            {
                "messages": List({"role": Value("string"), "content": List(text_item)}),
                "images": List(Image()),
                "episode_id": Value("string"),
                "round": Value("int32"),
                "source": Value("string"),
                "task_id": Value("string"),
                **size,
            }
        )
    if kind == "sft-verl":
        turn = {"thought": Value("string"), "action": Value("string"), "observation": Value("string")}
        return Features(
            {
                "data_source": Value("string"),
                "prompt": List({"role": Value("string"), "content": Value("string")}),
                "images": List(Image()),
                "ability": Value("string"),
                "reward_model": {"style": Value("string"), "ground_truth": Value("string")},
                "agent_name": Value("string"),
                "extra_info": {
                    "split": Value("string"),
                    "index": Value("int64"),
                    "episode_id": Value("string"),
                    "task_id": Value("string"),
                    "round": Value("int32"),
                    "source": Value("string"),
                    "n_steps": Value("int32"),
                    "verifier": Value("string"),
                    **size,
                    "need_tools_kwargs": Value("bool"),
                    "tools_kwargs": {GUI_TOOL: {"create_kwargs": {"ground_truth": Value("string")}}},
                    "turns": List(turn),
                },
            }
        )
    if kind == "ct-text":
        return Features(
            {
                "text": Value("string"),
                "episode_id": Value("string"),
                "round": Value("int32"),
                "reasons": List(Value("string")),
            }
        )
    if kind == "preferences":
        return Features(
            {
                "prompt": Value("string"),
                "chosen": Value("string"),
                "rejected": Value("string"),
                "pair_id": Value("string"),
                "episode_id": Value("string"),
                "step_index": Value("int32"),
                "round": Value("int32"),
                "model_version": Value("string"),
                "annotator": Value("string"),
            }
        )
    raise ValueError(f"unknown export {kind!r}; choose from {', '.join(KINDS)}")


# ------------------------------------------------------------------------------------------------ row builders
def _answer(step: dict[str, Any]) -> str:
    return render_answer(step.get("thought") or "", step.get("action") or "", FULL)


def trl_row(ep: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    """One episode as a multi-turn conversation: the screen before each step, then the agent's thought and action."""
    steps = ep["steps"] or []
    keep_from = 0 if ctx.max_images is None else max(len(steps) - ctx.max_images, 0)
    messages: list[dict[str, Any]] = [{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]}]
    images: list[dict[str, Any]] = []
    first: bytes | None = None
    for i, st in enumerate(steps):
        content: list[dict[str, Any]] = []
        data = ctx.image(st.get("screenshot_uri"), ep["episode_id"], i) if i >= keep_from else None
        if data is not None:
            content.append({"type": "image", "text": None})
            images.append({"bytes": data, "path": None})
            first = first or data
        text = f"Instruction: {ep['instruction'].strip()}\n" if i == 0 else ""
        if st.get("observation"):
            text += f"Observation:\n{st['observation'].strip()}\n"
        if text:
            content.append({"type": "text", "text": text})
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": _answer(st)}]})
    width, height = _size(first, ep)
    return {
        "messages": messages,
        "images": images,
        "episode_id": ep["episode_id"],
        "round": ep["round"],
        "source": ep["source"],
        "task_id": ep["task_id"],
        "width": width,
        "height": height,
        "coordinates": COORDINATES,
    }


#: How verl's tool agent loop acts: the policy's own answer format, each action also sent to the gui_act tool.
VERL_TOOL_NOTE = (
    f"\nTo act, call the {GUI_TOOL} tool with the action string, e.g. "
    f'{{"name": "{GUI_TOOL}", "arguments": {{"action": "click(point=\'<point>10 20</point>\')"}}}}; it returns the next '
    "screen."
)


def verl_row(ep: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    """One episode as a multi-turn RL task: the first screen as the prompt, the task's verifier as the ground truth
    (training/verl_reward.py), the gui_act tool's arguments, and the recorded turns as a reference."""
    steps = ep["steps"] or []
    first = steps[0] if steps else {}
    data = ctx.image(first.get("screenshot_uri"), ep["episode_id"], 0)
    prompt = render_prompt(ep["instruction"], [], first.get("observation"), FULL)
    truth = ground_truth(ep)
    truth_json = json.dumps(truth, sort_keys=True)
    width, height = _size(data, ep)
    idx = ctx.index
    ctx.index += 1
    return {
        "data_source": f"flywheel/{ep.get('task_family') or ep['source']}",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT + VERL_TOOL_NOTE},
            {"role": "user", "content": ("<image>" if data is not None else "") + prompt},
        ],
        "images": [] if data is None else [{"bytes": data, "path": None}],
        "ability": "gui_agent",
        "reward_model": {"style": "rule", "ground_truth": truth_json},
        "agent_name": "tool_agent",
        "extra_info": {
            "split": "train",  # set by export() from the task's hash
            "index": idx,
            "episode_id": ep["episode_id"],
            "task_id": ep["task_id"],
            "round": ep["round"],
            "source": ep["source"],
            "n_steps": ep["n_steps"],
            "verifier": truth["verifier"],
            "width": width,
            "height": height,
            "coordinates": COORDINATES,
            "need_tools_kwargs": True,
            "tools_kwargs": {GUI_TOOL: {"create_kwargs": {"ground_truth": truth_json}}},
            "turns": [
                {
                    "thought": s.get("thought") or "",
                    "action": s.get("action") or "",
                    "observation": s.get("observation"),
                }
                for s in steps
            ],  # fmt: skip
        },
    }


def split_of(task_id: str, fraction: float = VAL_FRACTION) -> str:
    """ "validation" for a stated share of tasks, by the task id's SHA-256 (stable across runs and machines)."""
    return "validation" if _task_hash(task_id) < fraction else "train"


def _task_hash(task_id: str) -> float:
    return int(hashlib.sha256(task_id.encode()).hexdigest()[:12], 16) / 16**12


def ct_text_row(ep: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    """One episode as plain text: the instruction, then each step's observation, thought and action."""
    parts = [f"Instruction: {ep['instruction'].strip()}"]
    for i, st in enumerate(ep["steps"] or []):
        if st.get("observation"):
            parts.append(f"Observation:\n{st['observation'].strip()}")
        parts.append(f"Step {i + 1}: {_answer(st)}")
    return {
        "text": "\n".join(parts) + "\n",
        "episode_id": ep["episode_id"],
        "round": ep["round"],
        "reasons": ep.get("reasons") or [],
    }


def preference_row(p: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    return {
        k: p.get(k)
        for k in (
            "prompt",
            "chosen",
            "rejected",
            "pair_id",
            "episode_id",
            "step_index",
            "round",
            "model_version",
            "annotator",
        )
    }


#: kind -> (table, its key for ordering, row builder)
KINDS: dict[str, tuple[str, str, Callable[[dict[str, Any], _Ctx], dict[str, Any]]]] = {
    "sft-trl": ("sft", "episode_id", trl_row),
    "sft-verl": ("sft", "episode_id", verl_row),
    "ct-text": ("ct", "episode_id", ct_text_row),
    "preferences": ("preference_pairs", "pair_id", preference_row),
}


def _batches(t: pa.Table, size: int) -> Iterator[list[dict[str, Any]]]:
    for b in t.to_batches(max_chunksize=size):
        yield b.to_pylist()


def export(
    lake: Lake,
    kind: str,
    out_dir: Path,
    *,
    version: int | None = None,
    round: int | None = None,
    max_images: int | None = None,
    batch_size: int = 64,
    progress: Callable[[int, int], None] | None = None,
    allow_empty: bool = False,
    allow_missing: bool = False,
    val_fraction: float = VAL_FRACTION,
) -> ExportResult:
    """Write the export's file(s) and out_dir/flywheel_export.json for one export kind; return what was written.

    One `data.parquet`, or for sft-verl `train.parquet` and `validation.parquet`: tasks whose id hashes below
    `val_fraction` are validation (with two tasks or more, each split gets at least one: the lowest-hash task is
    validation, the highest train). progress(done, total) is called after each batch. A missing screenshot is an
    ExportError naming it unless `allow_missing` (left out, counted in `missing_images`). An empty selection (or
    an empty split) is refused (ValueError, one line): Hugging Face `datasets` cannot load a 0-row Parquet file
    ("corresponds to no data"), so a trainer would fail later and less clearly. `allow_empty` writes it anyway,
    as one empty row group with the full schema (pyarrow, Polars and DuckDB read 0 rows;
    `datasets.Dataset(pyarrow.parquet.read_table(path))` is a 0-row dataset).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown export {kind!r}; choose from {', '.join(KINDS)}")
    if max_images is not None and max_images < 0:
        raise ValueError("--max-images must be >= 0")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    table, key, build = KINDS[kind]
    v = lake.version(table) if version is None else version
    flt = None if round is None else pc.field("round") == round
    rows = read_pile(lake, table, version=v, filter=flt) if table in PILES else lake.read(table, version=v, filter=flt)
    rows = rows.sort_by([("round", "ascending"), (key, "ascending")])
    where = f"table {table} at version {v}" + (f", round {round}" if round is not None else "")
    if not rows.num_rows and not allow_empty:
        raise ValueError(f"nothing to export: {where} has no rows (Hugging Face datasets cannot load a 0-row file)")
    parts = _splits(rows, val_fraction) if kind == "sft-verl" else {"": rows}
    empty = [s for s, t in parts.items() if not t.num_rows]
    if rows.num_rows and empty and not allow_empty:
        raise ValueError(f"nothing to export in the {empty[0]} split: {where} has only one task, {parts['train']['task_id'][0]}; "
                         "pass --allow-empty to write an empty split")  # fmt: skip
    features = _features(kind)
    made = datetime.now(UTC).isoformat(timespec="seconds")
    lineage = {
        "kind": kind, "table": table, "table_version": v, "round": round, "lake": str(lake.uri),
        "max_images": max_images, "pipeline_version": PIPELINE_VERSION, "made_at": made, "coordinates": COORDINATES,
        **({"val_fraction": val_fraction} if kind == "sft-verl" else {}),
    }  # fmt: skip
    schema = features.arrow_schema.with_metadata(
        {**features.arrow_schema.metadata, b"flywheel": json.dumps(lineage, sort_keys=True).encode()}
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = _Ctx(lake, max_images, allow_missing)
    files: dict[str, Path] = {}
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        if progress:
            progress(done[0], rows.num_rows)

    for split, part in parts.items():
        path = out_dir / (SPLIT_FILES[split] if split else DATA_FILE)
        _write(path, part, build, features, schema, ctx, batch_size, step, split)
        files[split or "train"] = path
    sidecar = out_dir / SIDECAR
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files.values()}
    main = files["train"]
    meta = {**lineage, "rows": rows.num_rows, "images": ctx.images, "missing_images": ctx.missing,
            "data_file": main.name, "sha256": digests[main.name], "files": digests,
            "split_rows": {s: t.num_rows for s, t in parts.items() if s}}  # fmt: skip
    sidecar.write_text(json.dumps(meta, indent=2, sort_keys=True))
    from storage.pins import pin_version

    pin_version(lake, table, v, f"export {kind}", str(out_dir.resolve()))  # `flywheel maintain` keeps this version
    return ExportResult(kind, out_dir, main, sidecar, table, v, rows.num_rows, ctx.images, ctx.missing, files,
                        {s: t.num_rows for s, t in parts.items() if s})  # fmt: skip


def _splits(rows: pa.Table, fraction: float) -> dict[str, pa.Table]:
    """sft-verl's train and validation rows, by task hash (split_of), each non-empty when there are two tasks."""
    tasks = sorted(set(rows.column("task_id").to_pylist()), key=_task_hash)
    val = {t for t in tasks if split_of(t, fraction) == "validation"}
    if len(tasks) >= 2 and not val:
        val = {tasks[0]}
    elif len(tasks) >= 2 and val >= set(tasks):
        val = val - {tasks[-1]}
    mask = pc.is_in(rows.column("task_id"), pa.array(sorted(val), pa.string()))
    return {"train": rows.filter(pc.invert(mask)), "validation": rows.filter(mask)}


def _write(path: Path, rows: pa.Table, build: Callable[[dict[str, Any], _Ctx], dict[str, Any]], features: Any,
           schema: pa.Schema, ctx: _Ctx, batch_size: int, step: Callable[[int], None], split: str) -> None:  # fmt: skip
    """One Parquet file of built rows, written to a temporary name and renamed (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    n = 0
    try:
        with pq.ParquetWriter(tmp, schema) as w:
            for batch in _batches(rows, batch_size):
                built = [build(r, ctx) for r in batch]
                if split:
                    for b in built:
                        b["extra_info"]["split"] = split
                w.write_table(pa.Table.from_pylist([features.encode_example(b) for b in built], schema=schema))
                n += len(batch)
                step(len(batch))
            if not n:  # an empty pile: one empty row group, so `datasets` loads 0 rows (no row group is "no data")
                w.write_table(schema.empty_table())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def read_lineage(data_file: Path) -> dict[str, Any]:
    """The lineage stored in an export's Parquet metadata (kind, table, table_version, ...)."""
    md = pq.read_schema(data_file).metadata or {}
    if b"flywheel" not in md:
        raise ValueError(f"{data_file} is not a flywheel export (no flywheel metadata)")
    return json.loads(md[b"flywheel"])
