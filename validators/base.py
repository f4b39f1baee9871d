"""The validator interface: one rule, two entry points that cannot drift apart.

A validator has a `name`, a `version` and a fixed set of reason `codes`. Its rule is written once, columnar, in
`_check(batch) -> Outcome` over an `EpisodeBatch` (the episodes table with its steps flattened once and shared by
every validator). `check_batch(table)` runs it over a whole Arrow table (the routing path: tens of thousands of
episodes per second); `check(episode)` runs the very same code on a one-row table, so the per-episode view used by
tests, the sandbox and RL rewards is the batch rule by construction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.records import Episode, Verdict, episodes_to_table

#: What `check_batch` returns: one row per input episode, in input order.
VERDICT_BATCH = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("passed", pa.bool_(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("score", pa.float64()),
        pa.field("details", pa.string()),
    ]
)

OK = "ok"


class EpisodeBatch:
    """An episodes table with its `steps` list flattened once: per-step columns plus each step's episode index.

    Validators read steps through `step(name)` (flat, aligned with `parent`) and reduce per episode with `any_step`
    / `first_step`, so no rule ever loops over episodes in Python.

    `loaded`: when the table was read with only some columns and step fields (routing reads what the validators
    declare in `reads`), the names read ("col", "steps.field"); asking for anything else raises instead of
    quietly judging nulls.
    """

    def __init__(self, table: pa.Table, loaded: frozenset[str] | None = None) -> None:
        self.table = table
        self.n = table.num_rows
        self.loaded = loaded
        col = table.column("steps") if "steps" in table.column_names else None
        if col is None:
            chunks = [pa.array([[]] * self.n, type=pa.list_(pa.struct([])))]
        else:  # chunk by chunk: combining a nested column would copy every step field, wanted or not
            chunks = [c for c in col.chunks if len(c)] or [pa.array([], type=col.type)]
        self._values = [c.flatten() for c in chunks]  # respects slicing; null lists contribute no steps
        self._chunk_rows = [len(c) for c in chunks]
        parents, lengths, row = [], [], 0
        for c in chunks:
            parents.append(np.asarray(pc.list_parent_indices(c).to_numpy(zero_copy_only=False), dtype=np.int64) + row)
            lengths.append(
                np.asarray(pc.fill_null(pc.list_value_length(c), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
            )
            row += len(c)
        self.parent = np.concatenate(parents) if parents else np.zeros(0, np.int64)
        self.lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        self.starts = (
            np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64) if self.n else np.zeros(0, np.int64)
        )
        self._cache: dict[str, Any] = {}

    @property
    def position(self) -> np.ndarray:
        """Each step's index within its episode (computed on first use: only failures' details need it)."""
        if "position" not in self._cache:
            p = self.parent
            self._cache["position"] = (
                np.arange(len(p), dtype=np.int64) - self.starts[p] if len(p) else np.zeros(0, np.int64)
            )
        return self._cache["position"]

    @classmethod
    def of(cls, data: pa.Table | EpisodeBatch) -> EpisodeBatch:
        return data if isinstance(data, EpisodeBatch) else cls(data)

    @property
    def n_steps_total(self) -> int:
        return len(self.parent)

    def _require(self, name: str) -> None:
        if self.loaded is not None and name not in self.loaded:
            raise KeyError(f"{name!r} was not read for this batch; the validator must list it in `reads`")

    def col(self, name: str) -> pa.Array:
        """An episode-level column (nulls when the table lacks it)."""
        key = "e:" + name
        if key not in self._cache:
            self._require(name)
            if name in self.table.column_names:
                self._cache[key] = self.table.column(name).combine_chunks()
            else:
                self._cache[key] = pa.nulls(self.n)
        return self._cache[key]

    def step(self, name: str) -> pa.Array | pa.ChunkedArray:
        """A step field, flattened over all episodes (aligned with `parent`): an Array, or a ChunkedArray when the
        table came in several chunks (combining would copy the field; Arrow compute takes either)."""
        key = "s:" + name
        if key not in self._cache:
            self._require("steps." + name)
            t = self._values[0].type
            if t.num_fields and t.get_field_index(name) >= 0:
                parts = [pc.struct_field(v, name) for v in self._values]
                self._cache[key] = parts[0] if len(parts) == 1 else pa.chunked_array(parts)
            else:
                self._cache[key] = pa.nulls(self.n_steps_total)
        return self._cache[key]

    def step_lists(self, name: str, fill: Any = None) -> pa.ChunkedArray:
        """A step field as one list per episode (nulls replaced by `fill` when given), chunk by chunk as the table
        came: no step value is copied (combining would copy every value of the field)."""
        field = self.step(name)
        out, row, step0 = [], 0, 0
        for i, n in enumerate(self._chunk_rows):
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(self.lengths[row : row + n], out=offsets[1:])
            if isinstance(field, pa.ChunkedArray):
                values = field.chunk(i)
            else:  # one array for every chunk (a field the table lacks: nulls)
                values = field.slice(step0, int(offsets[-1]))
            if fill is not None and values.null_count:
                values = pc.fill_null(values, fill)
            out.append(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values))
            row, step0 = row + n, step0 + int(offsets[-1])
        return pa.chunked_array(out)

    def any_step(self, mask: np.ndarray) -> np.ndarray:
        """Per episode: does any of its steps have mask True?"""
        if not len(mask):
            return np.zeros(self.n, dtype=bool)
        return np.bincount(self.parent[mask], minlength=self.n) > 0

    def count_step(self, mask: np.ndarray) -> np.ndarray:
        if not len(mask):
            return np.zeros(self.n, dtype=np.int64)
        return np.bincount(self.parent[mask], minlength=self.n)

    def first_step(self, mask: np.ndarray) -> np.ndarray:
        """Per episode: position of the first step with mask True, -1 when none."""
        out = np.full(self.n, -1, dtype=np.int64)
        idx = np.flatnonzero(mask)
        if len(idx):
            eps, first = np.unique(self.parent[idx], return_index=True)
            out[eps] = idx[first] - self.starts[eps]  # positions of these steps only, not of every step
        return out

    def take(self, indices: np.ndarray) -> EpisodeBatch:
        return EpisodeBatch(self.table.take(pa.array(indices, type=pa.int64())), self.loaded)


def per_value(arr: pa.Array | pa.ChunkedArray, fn: Any) -> np.ndarray:
    """fn (an elementwise Arrow predicate) per element, as numpy bools (null -> False). Over a dictionary array it
    runs once per distinct value and numpy gathers the answers by the indices (an Arrow take of a 4M-step boolean
    array cost more than the predicate): a dictionary-read step field costs one call per distinct value."""
    if not pa.types.is_dictionary(arr.type):
        return as_bool(fn(arr))
    out = []
    for c in arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]:
        answers = as_bool(fn(c.dictionary))
        if not len(answers):  # no distinct values: every index is null
            out.append(np.zeros(len(c), dtype=bool))
            continue
        got = answers[np.asarray(pc.fill_null(c.indices, 0).to_numpy(zero_copy_only=False), dtype=np.int64)]
        if c.null_count:
            got &= as_bool(c.is_valid())
        out.append(got)
    return np.concatenate(out) if out else np.zeros(0, dtype=bool)


def values_at(arr: pa.Array | pa.ChunkedArray, idx: np.ndarray) -> list[Any]:
    """The Python values at a few positions, chunk by chunk (a take on a ChunkedArray of dictionaries unifies and
    copies the whole array first: 1% of routing's CPU time for 16 screenshots)."""
    if not isinstance(arr, pa.ChunkedArray):
        return arr.take(pa.array(idx, pa.int64())).to_pylist()
    bounds = np.cumsum([0] + [len(c) for c in arr.chunks])
    which = np.searchsorted(bounds, idx, side="right") - 1
    return [arr.chunk(int(k))[int(i - bounds[k])].as_py() for i, k in zip(idx, which, strict=True)]


def as_bool(arr: pa.Array | pa.ChunkedArray, null: bool = False) -> np.ndarray:
    """A boolean Arrow array as numpy, with nulls mapped to `null`."""
    return np.asarray(pc.fill_null(arr, null).to_numpy(zero_copy_only=False), dtype=bool)


def as_float(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric Arrow array as float64 numpy, nulls as NaN."""
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan)
    # Arrow converts numbers with nulls to float64 with NaN in one pass (integers included)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


@dataclass
class Outcome:
    """A validator's answer for a batch, columnar: `failed` (bool per episode) and its reason codes.

    `reason` is None when the validator has a single failure code, else an array of codes (only read where
    failed). `details` holds JSON strings or None per episode; `score` floats (NaN = none).
    """

    failed: np.ndarray
    reason: str | np.ndarray | pa.Array
    score: np.ndarray | None = None
    details: pa.Array | list[str | None] | None = None


def scatter(col: pa.Array | pa.ChunkedArray, idx: np.ndarray, n: int) -> pa.Array | pa.ChunkedArray:
    """A length-n array with col's values at positions idx and nulls elsewhere (one Arrow take)."""
    inv = np.full(n, -1, dtype=np.int64)
    inv[idx] = np.arange(len(idx))
    return col.take(pa.array(inv, mask=inv < 0))


def step_details(batch: EpisodeBatch, first: np.ndarray, failed: np.ndarray, what: str) -> pa.Array:
    """JSON details '{"step": i, "what": ...}' for failed episodes, null elsewhere (vectorised over the failed ones
    only: formatting every episode's text and then discarding the passes' was 5% of routing's CPU time)."""
    idx = np.flatnonzero(failed)
    if not len(idx):
        return pa.nulls(batch.n, pa.string())
    steps = pc.cast(pa.array(first[idx]), pa.string())
    return scatter(pc.binary_join_element_wise(f'{{"check":"{what}","step":', steps, "}", ""), idx, batch.n)


class Validator:
    """Base class. Subclasses set `name`, `base_version`, `codes` and implement `_check`.

    Parameters (from the routing policy) are keyword arguments of the constructor; non-default parameters are
    folded into `version`, so verdicts made under different settings never collide on (episode, validator,
    version).
    """

    name: ClassVar[str] = ""
    base_version: ClassVar[str] = "1"
    codes: ClassVar[tuple[str, ...]] = ()
    kind: ClassVar[str] = "structural"
    defaults: ClassVar[dict[str, Any]] = {}
    #: What `_check` reads: episode columns and "steps.<field>" ("steps" alone: only the step count). Routing reads
    #: just the union over the policy's validators (Parquet nested projection); None means the whole episode.
    reads: ClassVar[tuple[str, ...] | None] = None
    #: Step fields of `reads` that `_check` also accepts as dictionary arrays (see `per_value`); routing reads a field
    #: as a dictionary only when every validator reading it accepts that.
    accepts_dictionary: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any) -> None:
        unknown = set(params) - set(self.defaults) - {"context"}
        if unknown:
            raise ValueError(f"validator {self.name}: unknown parameter(s) {', '.join(sorted(unknown))}")
        self.context = params.pop("context", None)
        self.params = {**self.defaults, **params}

    @property
    def version(self) -> str:
        changed = {k: v for k, v in self.params.items() if self.defaults.get(k) != v}
        if not changed:
            return self.base_version
        digest = hashlib.sha256(json.dumps(changed, sort_keys=True, default=str).encode()).hexdigest()[:8]
        return f"{self.base_version}+{digest}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(version={self.version!r})"

    # ------------------------------------------------------------------ the rule
    def _check(self, batch: EpisodeBatch) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    def after_batch(self, batch: EpisodeBatch, passed: np.ndarray) -> None:
        """Hook for stateful validators (dedup indexes) once a batch has been routed. No-op by default."""

    def pile_columns(self, batch: EpisodeBatch) -> dict[str, pa.Array]:
        """Columns this validator contributes to the batch's pile rows (exact dedup: its content keys). None by
        default."""
        return {}

    def pile_indexes(self, lake: Any) -> list[Any]:
        """Key indexes (storage.keyindex.FileIndex) this validator looks pile files up in, written beside each new
        pile file as routing appends it. None by default."""
        return []

    # ------------------------------------------------------------ entry points
    def check_batch(self, table: pa.Table | EpisodeBatch) -> pa.Table:
        """Verdicts for every episode of the table: (episode_id, passed, reason, score, details), input order."""
        batch = EpisodeBatch.of(table)
        out = self._check(batch)
        failed = np.asarray(out.failed, dtype=bool)
        if isinstance(out.reason, str):
            reason: pa.Array = pc.if_else(pa.array(failed), out.reason, OK)
            given = {out.reason} if failed.any() else set()
        else:  # only the failed episodes' codes are read, so only they are converted (numpy strings cost per item)
            bad = np.flatnonzero(failed)
            if isinstance(out.reason, (pa.Array, pa.ChunkedArray)):
                codes = out.reason.take(pa.array(bad))
            else:
                codes = pa.array(np.asarray(out.reason)[bad], type=pa.string())
            reason = pc.fill_null(scatter(codes, bad, batch.n), OK)
            given = set(pc.unique(codes).to_pylist())
        unknown = given - set(self.codes) - {OK}
        if unknown:  # a programming error, never bad data: codes are a fixed, documented set
            raise AssertionError(f"validator {self.name} produced undeclared reason code(s) {sorted(unknown)}")
        score = out.score if out.score is not None else np.where(failed, 0.0, 1.0)
        score_arr = pa.array(score, type=pa.float64(), from_pandas=True)  # NaN -> null
        details = out.details if out.details is not None else pa.nulls(batch.n, pa.string())
        if not isinstance(details, (pa.Array, pa.ChunkedArray)):
            details = pa.array(details, type=pa.string())
        return pa.Table.from_arrays(
            [batch.col("episode_id").cast(pa.string()), pa.array(~failed), reason, score_arr, details],
            schema=VERDICT_BATCH,
        )

    def check(self, episode: Episode) -> Verdict:
        """The verdict for one episode: `check_batch` on a one-row table, so both paths share every rule."""
        row = self.check_batch(episodes_to_table([episode])).to_pylist()[0]
        details = json.loads(row["details"]) if row["details"] else None
        return Verdict(row["passed"], row["reason"], row["score"], details)
