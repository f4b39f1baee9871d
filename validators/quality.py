"""Batch data quality: a Great Expectations 1.x suite over each new batch of episodes, before any is routed.

Validators judge one episode; this suite judges the batch (null rates, value sets, ranges, step counts), so an
upstream bug that breaks every episode the same way stops the round with a clear message instead of quietly
filling the CT pile. Results are stored in `dq_results`; routing a failed batch needs an explicit, recorded
override. GX runs on an ephemeral context over a pandas frame of episode-level columns (no steps), so it costs
a fraction of routing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.actions import MAX_COORD
from schemas.records import SOURCES
from storage.keyindex import hex_words, sort_order
from storage.lake import content_id

SUITE = "episodes_batch"
#: Episode-level columns the suite reads (routing reads these without the steps).
COLUMNS = [
    "episode_id", "source", "round", "task_id", "instruction", "n_steps",
    "screen_width", "screen_height", "env_reward", "outcome", "pipeline_version",
]  # fmt: skip
#: String columns with a few distinct values (given to GX as categoricals).
_FEW_VALUES = frozenset({"source", "outcome", "pipeline_version"})
OUTCOMES = ("finished", "step_limit", "unreadable_action", "ended", "unknown")


class DataQualityError(ValueError):
    """A batch failed its data-quality suite; routing stopped (override: --allow-failed-dq)."""


@dataclass(frozen=True)
class DQResult:
    round: int
    batch_id: str
    success: bool
    n_expectations: int
    n_failed: int
    failed: list[dict[str, Any]]
    overridden: bool = False

    def row(self) -> dict[str, Any]:
        return {
            "result_id": content_id(str(self.round), self.batch_id, SUITE, str(self.overridden)),
            "round": self.round,
            "batch_id": self.batch_id,
            "suite": SUITE,
            "success": self.success,
            "n_expectations": self.n_expectations,
            "n_failed": self.n_failed,
            "overridden": self.overridden,
            "details": json.dumps({"failed": self.failed}, default=str),
            "validated_at": datetime.now(UTC),
        }

    def message(self) -> str:
        parts = [f"{f['expectation']}({f.get('column')}): {f.get('observed')}" for f in self.failed[:5]]
        return f"{self.n_failed}/{self.n_expectations} expectation(s) failed: " + "; ".join(parts)


def batch_id(ids: pa.Array | pa.ChunkedArray) -> str:
    """A stable id of a batch: the hash of its sorted episode ids (storage.content_id of them, computed over one
    Arrow buffer instead of a million Python strings)."""
    if not len(ids):
        return content_id("empty")
    flat = (ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids).cast(pa.string())
    words = hex_words(flat)
    if words is not None:  # content-hash ids: sorted as 128-bit numbers (up to 2x faster than Arrow's string sort)
        be = words.byteswap()  # each half as the text spells it (big-endian): their order is the text's
        order = sort_order(be)
        off = np.frombuffer(flat.buffers()[1], np.int32, len(flat) + 1, flat.offset * 4)
        text = np.frombuffer(flat.buffers()[2], np.uint8)[off[0] : off[-1]].reshape(-1, 32)
        rows = np.full((len(flat), 33), 0x1F, np.uint8)  # "<id>\x1f" each, as below
        rows[:, :32] = text[order]
        return hashlib.sha256(rows.data).hexdigest()[:32]
    s = pc.take(ids, pc.sort_indices(ids))
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    joined = pc.binary_join_element_wise(pc.fill_null(s.cast(pa.string()), "None"), "", "\x1f")  # "<id>\x1f" each
    off = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset : joined.offset + len(joined) + 1]
    data = memoryview(joined.buffers()[2])[int(off[0]) : int(off[-1])]
    return hashlib.sha256(data).hexdigest()[:32]


def expectations(round: int, max_steps: int = 1000) -> list[Any]:
    import great_expectations as gx

    E = gx.expectations
    return [
        *[
            E.ExpectColumnValuesToNotBeNull(column=c)
            for c in ("episode_id", "source", "task_id", "instruction", "n_steps")
        ],
        E.ExpectColumnValuesToBeUnique(column="episode_id"),
        E.ExpectColumnValuesToBeInSet(column="source", value_set=list(SOURCES)),
        E.ExpectColumnValuesToBeInSet(column="round", value_set=[round]),
        # (no ExpectColumnMeanToBeBetween on n_steps: implied by this one, and GX 1.24 checks every value of a
        # column it averages for decimal.Decimal in a Python loop, ~0.5 CPU-s per 200k episodes)
        E.ExpectColumnValuesToBeBetween(column="n_steps", min_value=1, max_value=max_steps),
        E.ExpectColumnProportionOfNonNullValuesToBeBetween(column="screen_width", min_value=0.95),
        E.ExpectColumnValuesToBeBetween(column="screen_width", min_value=1, max_value=MAX_COORD),
        E.ExpectColumnValuesToBeBetween(column="screen_height", min_value=1, max_value=MAX_COORD),
        E.ExpectColumnValuesToBeBetween(column="env_reward", min_value=-1.0, max_value=1.0),  # -1: unreadable action
        E.ExpectColumnValuesToBeInSet(column="outcome", value_set=list(OUTCOMES)),
        E.ExpectColumnValuesToNotBeNull(column="pipeline_version"),
    ]


def run_suite(table: pa.Table, round: int) -> DQResult:
    """Run the suite over episode-level columns of a batch (an Arrow table with COLUMNS)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GX sets its own modules to INFO; their lines ("Created temporary directory ...") would land in every round's log
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)

    # pandas 3 backs strings with Arrow, and GX filters the whole frame once per expectation: 168 Arrow takes
    # copying every string were 3.3 of the suite's 4.0 s at 600k episodes. Columns of a few values become
    # categoricals (takes and null tests on integer codes), the others Python objects (takes of pointers).
    cols = [c for c in COLUMNS if c in table.column_names]
    frame = pa.table(
        {c: pc.dictionary_encode(table.column(c)) if c in _FEW_VALUES else table.column(c) for c in cols}
    ).to_pandas()
    for c in cols:
        if isinstance(frame[c].dtype, pd.StringDtype):
            frame[c] = frame[c].astype(object)
    for c in COLUMNS:
        if c not in frame.columns:
            frame[c] = None
        elif frame[c].dtype.kind == "i" and frame[c].dtype != "int64":
            # GX's range checks are vectorised only for the platform int and float dtypes; on int32 they call a
            # Python function per value (seconds per million rows)
            frame[c] = frame[c].astype("int64")
    from great_expectations.execution_engine import pandas_execution_engine

    # GX fingerprints every frame under HASH_THRESHOLD bytes by hashing all its values (a batch marker for its data
    # docs): 3 of GX's 7.5 s at 1M episodes. The batch's id is ours (batch_id), so the fingerprint is not needed.
    pandas_execution_engine.HASH_THRESHOLD = 0
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    bd = (
        ctx.data_sources.add_pandas("episodes").add_dataframe_asset("batch").add_batch_definition_whole_dataframe("all")
    )
    suite = ctx.suites.add(gx.ExpectationSuite(name=SUITE, expectations=expectations(round)))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=SUITE, data=bd, suite=suite))
    res = vd.run(batch_parameters={"dataframe": frame})
    failed = []
    for r in res.results:
        if not r.success:
            cfg = r.expectation_config
            result = r.result or {}
            observed = result.get("observed_value", result.get("unexpected_count"))
            if r.exception_info and r.exception_info.get("raised_exception"):
                observed = r.exception_info.get("exception_message")
            failed.append({"expectation": cfg.type, "column": cfg.kwargs.get("column"), "observed": observed,
                           "sample": (result.get("partial_unexpected_list") or [])[:5]})  # fmt: skip
    return DQResult(
        round, batch_id(table.column("episode_id")), bool(res.success), len(res.results), len(failed), failed
    )
