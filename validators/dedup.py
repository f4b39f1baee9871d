"""Dedup validators: an episode that repeats one already in a pile, or an earlier one of the same batch, fails with
reason `duplicate` and lands in CT, so no content is ever twice in SFT.

Exact: a content key (a 128-bit hash of the instruction and the action strings) against the keys of every episode in
either pile and of the batch so far. Routing stores each routed episode's key on its pile row (`content_key`, with
`content_key_version`), so the pile index is one narrow column of the thin piles, read in one pass per round; only
rows without a key of this version (routed without exact dedup, before schema 2, or under another Polars) are
rehashed from their episodes' actions. Near: MinHash (datasketch) over word 3-grams of the same text with an LSH
index; the estimated Jaccard similarity must reach `threshold`.

`check_batch` never changes the index (checking the same episode twice gives the same answer); routing calls
`after_batch` once a batch is in the piles.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.keyindex import FileIndex, HighWordFilter, contains, fmix64, key_words, sort_order
from validators.base import EpisodeBatch, Outcome, Validator, scatter

DUPLICATE = "duplicate"
_POLARS = __import__("polars").__version__


def _combined(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def content_text(b: EpisodeBatch) -> pa.Array:
    """Per episode: instruction, 0x1f, the action strings joined by 0x1e (what a duplicate repeats)."""
    joined = _combined(pc.binary_join(b.step_lists("action", fill=""), "\x1e"))
    return pc.binary_join_element_wise(pc.fill_null(b.col("instruction"), ""), joined, "\x1f")


def _hex(words: list[np.ndarray]) -> pa.Array:
    """Fixed-width hex strings of the concatenated uint64 columns, each word's bytes little-endian (`np.stack`
    keeps native order; the stored keys depend on it, so it stays), vectorised, no Python loop."""
    n = len(words[0])
    raw = np.stack([w.astype(">u8") for w in words], axis=1).tobytes().hex().encode()
    width = 16 * len(words)
    offsets = np.arange(0, n * width + 1, width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw))


def content_words(b: EpisodeBatch) -> np.ndarray:
    """A 128-bit content key per episode as (n, 2) uint64 words: two seeded Polars row hashes of (instruction,
    [actions]); `content_keys` spells them in hex, `storage.keyindex.key_words` reads them back.

    Polars only promises hash stability within one Polars version, so the version is part of ExactDedup's version:
    after an upgrade the pile keys are recomputed from the piles instead of read from stale verdicts.
    """
    import polars as pl

    # the actions as one list per episode, chunk by chunk (no copy of the strings; a row's hash does not depend on
    # how the frame is chunked)
    actions = b.step_lists("action", fill="")
    df = pl.DataFrame(
        {"i": pl.Series(pc.fill_null(b.col("instruction"), "")), "a": pl.from_arrow(actions, rechunk=False)}
    )
    return np.column_stack([df.hash_rows(seed=s).to_numpy() for s in (0x5EED, 0xF1E1)]).astype(np.uint64)


def content_keys(b: EpisodeBatch) -> pa.Array:
    """`content_words` as 32 hex characters per episode (the pile rows' content_key)."""
    words = content_words(b)
    return _hex([words[:, 0], words[:, 1]])


#: What the dedup indexes read of a pile's episodes: the content, nothing else of the steps.
_CONTENT = ["episode_id", "instruction", "steps"]


def _read_piles(lake: Any, columns: list[str], filter: pc.Expression | None = None) -> list[pa.Table]:
    from storage.piles import PILES, read_pile

    return [read_pile(lake, p, columns, filter=filter, step_fields=["action"]) for p in PILES]


class ExactDedup(Validator):
    """Exact duplicates of the instruction and action sequence."""

    name = "dedup_exact"
    kind = "dedup"
    reads = ("instruction", "steps.action")
    codes = (DUPLICATE,)
    base_version = f"2-polars{_POLARS}"

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._runs: list[np.ndarray] = []  # sorted (n, 2) uint64 key words: one run per pile file, one per batch
        self._filter: HighWordFilter | None = None  # over the runs' high words (built in `prepare`)

    def pile_index(self, lake: Any) -> FileIndex:
        """The piles' key index for this version: per pile data file, its rows' content keys (the content_key
        column where this version wrote it; otherwise rehashed from the episodes' actions, once per file)."""

        from storage.piles import join_episodes

        def build(t: pa.Table) -> np.ndarray:
            ok = np.asarray(pc.fill_null(pc.equal(t.column("content_key_version"), self.version), False), dtype=bool)
            words = [key_words(t.column("content_key").filter(pa.array(ok)))]
            if not ok.all():  # routed without exact dedup, before schema 2, or under another Polars: rehash the
                # episodes of these very rows (not of the committed pile: a writer builds this before its commit)
                e = join_episodes(
                    lake, t.filter(pa.array(~ok)).select(["episode_id", "round"]), ["instruction", "steps"], ["action"]
                )
                if e.num_rows:
                    words.append(content_words(EpisodeBatch(e)))
            return np.concatenate(words)

        return FileIndex(
            f"{self.name}-{self.version}", ("episode_id", "round", "content_key", "content_key_version"), build
        )

    def prepare(self, lake: Any) -> None:
        """Load the content keys of every episode already in a pile from the piles' key index (storage/keyindex.py):
        16 bytes per episode, sorted per data file, so a round reads neither the piles' key columns nor, at 10M
        episodes, spends seconds joining its batch against them."""
        from storage import keyindex
        from storage.piles import PILES

        index = self.pile_index(lake)
        self._runs = [r for p in PILES for r in keyindex.runs(lake, p, index, lake.delta(p))]
        stored = sum(len(r) for r in self._runs)
        self._filter = HighWordFilter(self._runs, 2 * stored + 1_000_000) if len(self._runs) > 4 else None

    def pile_indexes(self, lake: Any) -> list[FileIndex]:
        return [self.pile_index(lake)]

    def pile_columns(self, batch: EpisodeBatch) -> dict[str, pa.Array]:
        return {"content_key": self._keys(batch), "content_key_version": pa.repeat(pa.scalar(self.version), batch.n)}

    def _words(self, b: EpisodeBatch) -> tuple[np.ndarray, np.ndarray]:
        """The batch's content words and the order that sorts them (computed once per batch)."""
        if "dedup_words" not in b._cache:
            words = content_words(b)
            b._cache["dedup_words"] = words, sort_order(words)
        return b._cache["dedup_words"]

    def _keys(self, b: EpisodeBatch) -> pa.Array:
        if "dedup_keys" not in b._cache:
            words, _ = self._words(b)
            b._cache["dedup_keys"] = _hex([words[:, 0], words[:, 1]])
        return b._cache["dedup_keys"]

    def _check(self, b: EpisodeBatch) -> Outcome:
        words, order = self._words(b)
        in_pile = contains(self._runs, words, order, prefilter=self._filter)
        # the first of each run of equal keys in sorted order; its smallest position is the batch's first copy
        is_first = np.zeros(b.n, dtype=bool)
        if b.n:
            ranked = words[order]
            starts = np.flatnonzero(np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1)])
            is_first[np.minimum.reduceat(order, starts)] = True
        failed = in_pile | ~is_first
        details = None  # passes need none: the pile row carries the key (content_key)
        if failed.any():
            bad = np.flatnonzero(failed)
            where = pa.array(np.where(in_pile[bad], "pile", "batch"), pa.string())
            dup = pc.binary_join_element_wise('{"key":"', self._keys(b).take(pa.array(bad)), '","duplicate_of":"',
                                              where, '"}', "")  # fmt: skip
            details = scatter(dup, bad, b.n)
        return Outcome(failed, DUPLICATE, details=details)

    def after_batch(self, b: EpisodeBatch, passed: np.ndarray) -> None:
        words, order = self._words(b)
        self._runs.append(np.ascontiguousarray(words[order]))
        if self._filter is not None:
            self._filter.add(self._runs[-1])


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def shingle_hashes(b: EpisodeBatch, n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(hash, episode index) of every word n-gram of each episode's content text, columnar (Polars hash)."""
    import polars as pl

    words = pc.split_pattern_regex(pc.utf8_lower(content_text(b)), r"[^\w]+")
    flat = pc.list_flatten(words)
    parent = np.asarray(pc.list_parent_indices(words).to_numpy(zero_copy_only=False), dtype=np.int64)
    keep = np.asarray(pc.greater(pc.utf8_length(flat), 0).to_numpy(zero_copy_only=False), dtype=bool)
    flat, parent = flat.filter(pa.array(keep)), parent[keep]
    if len(flat) < n:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    m = len(flat) - n + 1
    same = parent[:m] == parent[n - 1 :]
    gram = pc.binary_join_element_wise(*[flat.slice(i, m) for i in range(n)], " ")
    h = pl.Series(gram.filter(pa.array(same))).hash(seed=7).to_numpy()
    return fmix64(h.astype(np.uint64)), parent[:m][same]


def minhash_signatures(h: np.ndarray, parent: np.ndarray, n_episodes: int, num_perm: int, seed: int) -> np.ndarray:
    """MinHash signatures (n_episodes x num_perm, uint64); rows of episodes without shingles are all-max."""
    rng = np.random.RandomState(seed)
    a = rng.randint(0, 1 << 62, num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    bb = rng.randint(0, 1 << 62, num_perm, dtype=np.uint64)
    sig = np.full((n_episodes, num_perm), _MASK64, dtype=np.uint64)
    if not len(h):
        return sig
    order = np.argsort(parent, kind="stable")
    h, parent = h[order], parent[order]
    eps, starts = np.unique(parent, return_index=True)
    with np.errstate(over="ignore"):
        for k in range(num_perm):
            sig[eps, k] = np.minimum.reduceat(h * a[k] + bb[k], starts)
    return sig


class NearDedup(Validator):
    """Near duplicates: MinHash LSH over word 3-grams of instruction and actions (estimated Jaccard >= threshold)."""

    name = "dedup_near"
    kind = "dedup"
    reads = ("instruction", "steps.action")
    codes = (DUPLICATE,)
    base_version = f"2-polars{_POLARS}"
    defaults = {"threshold": 0.9, "num_perm": 64, "seed": 1}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._lsh = self._new_lsh()
        self._sigs: dict[str, Any] = {}

    def _new_lsh(self) -> Any:
        from datasketch import MinHashLSH

        return MinHashLSH(threshold=self.params["threshold"], num_perm=self.params["num_perm"])

    def minhashes(self, b: EpisodeBatch) -> list[Any]:
        """datasketch LeanMinHash objects from signatures computed columnar (numpy), one per episode."""
        from datasketch import LeanMinHash

        if "minhashes" not in b._cache:
            h, parent = shingle_hashes(b)
            sig = minhash_signatures(h, parent, b.n, self.params["num_perm"], self.params["seed"])
            seed = self.params["seed"]
            b._cache["minhashes"] = [LeanMinHash(seed=seed, hashvalues=row, scheme="affine64") for row in sig]
        return b._cache["minhashes"]

    def prepare(self, lake: Any) -> None:
        """Index every episode already in a pile (reads the piles' instructions and actions)."""
        self._lsh, self._sigs = self._new_lsh(), {}
        for t in _read_piles(lake, _CONTENT):
            for batch in t.to_batches(max_chunksize=50_000):
                b = EpisodeBatch(pa.Table.from_batches([batch]))
                self._insert(self._lsh, self._sigs, b.col("episode_id").to_pylist(), self.minhashes(b))

    @staticmethod
    def _insert(lsh: Any, sigs: dict[str, Any], ids: list[str], mhs: list[Any]) -> None:
        with lsh.insertion_session() as session:
            for i, m in zip(ids, mhs):
                if i not in sigs:
                    session.insert(i, m)
                    sigs[i] = m

    def _match(self, lsh: Any, sigs: dict[str, Any], m: Any) -> str | None:
        best = None
        for cand in lsh.query(m):
            if m.jaccard(sigs[cand]) >= self.params["threshold"]:
                best = cand if best is None else min(best, cand)
        return best

    def _check(self, b: EpisodeBatch) -> Outcome:
        ids = b.col("episode_id").to_pylist()
        mhs = self.minhashes(b)
        local, local_sigs = self._new_lsh(), {}
        failed = np.zeros(b.n, dtype=bool)
        details = np.full(b.n, None, dtype=object)
        for i, (eid, m) in enumerate(zip(ids, mhs)):
            hit = self._match(self._lsh, self._sigs, m) if eid not in self._sigs else None
            where = "pile"
            if hit is None:
                hit, where = self._match(local, local_sigs, m), "batch"
            if hit is not None and hit != eid:
                failed[i] = True
                details[i] = f'{{"duplicate_of":"{where}","episode_id":"{hit}"}}'
            if eid not in local_sigs:
                local.insert(eid, m)
                local_sigs[eid] = m
        return Outcome(failed, DUPLICATE, details=pa.array(details, type=pa.string()))

    def after_batch(self, b: EpisodeBatch, passed: np.ndarray) -> None:
        self._insert(self._lsh, self._sigs, b.col("episode_id").to_pylist(), self.minhashes(b))
