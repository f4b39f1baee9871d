"""Exports of the piles for training elsewhere, each a Parquet file the Hugging Face `datasets` library loads.

    sft-trl      SFT pile -> TRL conversational rows: `messages` (system, then user/assistant turns, one pair per
                 step; user turns carry the screenshot as an image item) and `images` (PNG/JPEG bytes, in order)
    sft-verl     SFT pile -> verl RL parquet: data_source, prompt (chat messages), images, ability,
                 reward_model {style, ground_truth}, extra_info {split, index, episode_id, ...}
    ct-text      CT pile -> plain text for language-model training: `text` (+ episode_id, round, reasons)
    preferences  preference_pairs -> (prompt, chosen, rejected) for DPO-style trainers

Each export reads its table at one Delta version (the newest unless given) and records it: in the Parquet file's
schema metadata under b"flywheel" and in the sidecar `flywheel_export.json` (with the row count and the file's
SHA-256). The Hugging Face feature types go in the standard b"huggingface" metadata, so images decode as images.
Rows are in (round, key) order, so the same pile version always gives the same rows in the same order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core import PIPELINE_VERSION
from schemas.prompt import PromptConfig, render_answer, render_prompt
from storage.errors import LakeError
from storage.lake import Lake
from storage.piles import PILES, read_pile

DATA_FILE = "data.parquet"
SIDECAR = "flywheel_export.json"
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


@dataclass(frozen=True)
class ExportResult:
    kind: str
    out_dir: Path
    data_file: Path
    sidecar: Path
    table: str
    table_version: int
    rows: int
    images: int
    missing_images: int


@dataclass
class _Ctx:
    lake: Lake
    max_images: int | None
    images: int = 0
    missing: int = 0
    index: int = 0

    def image(self, uri: str | None) -> bytes | None:
        if not uri:
            return None
        try:
            data = self.lake.objects.get_object(uri)
        except LakeError:
            self.missing += 1
            return None
        self.images += 1
        return data


def _features(kind: str):  # noqa: ANN202 - datasets.Features
    from datasets import Features, Image, List, Value

    text_item = {"type": Value("string"), "text": Value("string")}
    if kind == "sft-trl":
        return Features(
            {
                "messages": List({"role": Value("string"), "content": List(text_item)}),
                "images": List(Image()),
                "episode_id": Value("string"),
                "round": Value("int32"),
                "source": Value("string"),
                "task_id": Value("string"),
            }
        )
    if kind == "sft-verl":
        return Features(
            {
                "data_source": Value("string"),
                "prompt": List({"role": Value("string"), "content": Value("string")}),
                "images": List(Image()),
                "ability": Value("string"),
                "reward_model": {"style": Value("string"), "ground_truth": Value("string")},
                "extra_info": {
                    "split": Value("string"),
                    "index": Value("int64"),
                    "episode_id": Value("string"),
                    "task_id": Value("string"),
                    "round": Value("int32"),
                    "source": Value("string"),
                    "n_steps": Value("int32"),
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
    for i, st in enumerate(steps):
        content: list[dict[str, Any]] = []
        data = ctx.image(st.get("screenshot_uri")) if i >= keep_from else None
        if data is not None:
            content.append({"type": "image", "text": None})
            images.append({"bytes": data, "path": None})
        text = f"Instruction: {ep['instruction'].strip()}\n" if i == 0 else ""
        if st.get("observation"):
            text += f"Observation:\n{st['observation'].strip()}\n"
        if text:
            content.append({"type": "text", "text": text})
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": _answer(st)}]})
    return {
        "messages": messages,
        "images": images,
        "episode_id": ep["episode_id"],
        "round": ep["round"],
        "source": ep["source"],
        "task_id": ep["task_id"],
    }


def verl_row(ep: dict[str, Any], ctx: _Ctx) -> dict[str, Any]:
    """One episode as an RL task: the first state as the prompt, the recorded trajectory as the rule's ground truth."""
    steps = ep["steps"] or []
    first = steps[0] if steps else {}
    data = ctx.image(first.get("screenshot_uri"))
    prompt = render_prompt(ep["instruction"], [], first.get("observation"), FULL)
    truth = {
        "reference_answer": ep.get("reference_answer"),
        "final_answer": ep.get("final_answer"),
        "actions": [s.get("action") for s in steps],
        "screen": [ep.get("screen_width"), ep.get("screen_height")],
    }
    idx = ctx.index
    ctx.index += 1
    return {
        "data_source": f"flywheel/{ep.get('task_family') or ep['source']}",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": ("<image>" if data is not None else "") + prompt},
        ],
        "images": [] if data is None else [{"bytes": data, "path": None}],
        "ability": "gui_agent",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, sort_keys=True)},
        "extra_info": {
            "split": "train",
            "index": idx,
            "episode_id": ep["episode_id"],
            "task_id": ep["task_id"],
            "round": ep["round"],
            "source": ep["source"],
            "n_steps": ep["n_steps"],
        },
    }


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
) -> ExportResult:
    """Write out_dir/data.parquet and out_dir/flywheel_export.json for one export kind; return what was written.

    progress(done, total) is called after each batch. An empty selection is refused (ValueError, one line):
    Hugging Face `datasets` cannot load a 0-row Parquet file ("corresponds to no data"), so a trainer would fail
    later and less clearly. `allow_empty` writes it anyway, as one empty row group with the full schema (pyarrow,
    Polars and DuckDB read 0 rows; `datasets.Dataset(pyarrow.parquet.read_table(path))` is a 0-row dataset).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown export {kind!r}; choose from {', '.join(KINDS)}")
    if max_images is not None and max_images < 0:
        raise ValueError("--max-images must be >= 0")
    table, key, build = KINDS[kind]
    v = lake.version(table) if version is None else version
    flt = None if round is None else pc.field("round") == round
    rows = read_pile(lake, table, version=v, filter=flt) if table in PILES else lake.read(table, version=v, filter=flt)
    rows = rows.sort_by([("round", "ascending"), (key, "ascending")])
    if not rows.num_rows and not allow_empty:
        where = f"table {table} at version {v}" + (f", round {round}" if round is not None else "")
        raise ValueError(f"nothing to export: {where} has no rows (Hugging Face datasets cannot load a 0-row file)")
    features = _features(kind)
    made = datetime.now(UTC).isoformat(timespec="seconds")
    lineage = {
        "kind": kind, "table": table, "table_version": v, "round": round, "lake": str(lake.uri),
        "max_images": max_images, "pipeline_version": PIPELINE_VERSION, "made_at": made,
    }  # fmt: skip
    schema = features.arrow_schema.with_metadata(
        {**features.arrow_schema.metadata, b"flywheel": json.dumps(lineage, sort_keys=True).encode()}
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    data_file, sidecar = out_dir / DATA_FILE, out_dir / SIDECAR
    tmp = out_dir / f".{DATA_FILE}.tmp"
    ctx = _Ctx(lake, max_images)
    done = 0
    try:
        with pq.ParquetWriter(tmp, schema) as w:
            for batch in _batches(rows, batch_size):
                encoded = [features.encode_example(build(r, ctx)) for r in batch]
                w.write_table(pa.Table.from_pylist(encoded, schema=schema))
                done += len(batch)
                if progress:
                    progress(done, rows.num_rows)
            if not done:  # an empty pile: one empty row group, so `datasets` loads 0 rows (no row group is "no data")
                w.write_table(schema.empty_table())
        tmp.replace(data_file)  # a reader never sees a half-written export
    finally:
        tmp.unlink(missing_ok=True)
    digest = hashlib.sha256(data_file.read_bytes()).hexdigest()
    meta = {**lineage, "rows": rows.num_rows, "images": ctx.images, "missing_images": ctx.missing,
            "data_file": DATA_FILE, "sha256": digest}  # fmt: skip
    sidecar.write_text(json.dumps(meta, indent=2, sort_keys=True))
    from storage.pins import pin_version

    pin_version(lake, table, v, f"export {kind}", str(out_dir.resolve()))  # `flywheel maintain` keeps this version
    return ExportResult(kind, out_dir, data_file, sidecar, table, v, rows.num_rows, ctx.images, ctx.missing)


def read_lineage(data_file: Path) -> dict[str, Any]:
    """The lineage stored in an export's Parquet metadata (kind, table, table_version, ...)."""
    md = pq.read_schema(data_file).metadata or {}
    if b"flywheel" not in md:
        raise ValueError(f"{data_file} is not a flywheel export (no flywheel metadata)")
    return json.loads(md[b"flywheel"])
