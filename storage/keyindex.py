"""Key indexes beside the Delta data files: per data file, the sorted 128-bit hashes of one key column.

Why: an idempotent append and exact dedup must look up every key of a batch among all keys already stored. Keys
are content hashes, so file statistics prune nothing, and reading the key column of every data file each round
made ingest and routing slow down as the lake grew (at 10M episodes, 1.5 s of a 3.5 s round for the episode ids
alone). A sidecar holds 16 bytes per key, already sorted, so a lookup is a binary search per file instead of a
Parquet scan and a join.

Sidecars are a cache, never the truth. Each one is a pure function of one immutable data file (Delta never
rewrites a file in place: a compaction or delete writes new files under new names), and a lookup builds any that
is missing or unreadable from its file and stores it. So a crash between a commit and its sidecar, a concurrent
writer, or a lost sidecar cannot make a key look absent; `flywheel check` compares every sidecar with its file,
and `flywheel maintain` removes the sidecars of files no longer in the table.

Layout, in the lake's object store: `_index/<table>/<index name>/<data file name>.npy`, an (n, 2) uint64 array of
(high, low) words sorted by high then low; `_index/<table>/<index name>/_merged/<id>.npz`, the same for a set of
files (`files`, `words`), merged once enough single-file runs pile up, as an LSM tree merges its runs.
"""

from __future__ import annotations

import hashlib
import io
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from cachetools import LRUCache

from storage.delta import key_strings, snapshot_dataset

INDEX_ROOT = "_index"
#: Single-file runs (and segments) merged into one segment once a lookup finds this many.
MERGE_RUNS = 16
SEGMENTS = "_merged"
#: Loaded sidecars kept in memory per process (they never change, so a cached one is never stale).
CACHE_BYTES = 1 << 30
_HEX32 = r"^[0-9a-f]{32}$"
#: Folder prefix of the tables' primary-key indexes. Version 2 hashes non-hex keys with MD5; version 1's `key-`
#: folders (BLAKE2b) are never read again and `flywheel maintain` drops them (`stale_sidecars`).
KEY_INDEX_PREFIX = "key2-"
_RETIRED_PREFIXES = ("key-",)


def _combined(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def key_words(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """32-hex-digit keys -> an (n, 2) uint64 array: the 128 bits they spell, each 8-byte half read little-endian
    (the byte order validators.dedup writes content keys in, so the words are the two hashes they came from)."""
    return _decode_hex(_combined(keys).cast(pa.string()))[0]


def _decode_hex(keys: pa.Array) -> tuple[np.ndarray, bool]:
    """(words, whether every key is lower-case hex: the text re-encodes to itself); ValueError if a key is not 32
    hex digits of either case."""
    n = len(keys)
    if n == 0:
        return np.zeros((0, 2), np.uint64), True
    if keys.null_count:
        raise ValueError("keys must not be null")
    offsets = np.frombuffer(keys.buffers()[1], np.int32, n + 1, keys.offset * 4)
    if not (np.diff(offsets) == 32).all():
        raise ValueError("keys must be 32 hex digits")
    text = keys.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]]
    raw = bytes.fromhex(text.decode("ascii", errors="replace"))
    return np.frombuffer(raw, "<u8").reshape(n, 2).astype(np.uint64), raw.hex().encode() == text


def hex_words(keys: pa.Array) -> np.ndarray | None:
    """key_words of keys that are all 32 lower-case hex digits (content-hash ids), else None (any other key, or a
    null): for callers that take a fast path on such keys and fall back on anything else."""
    try:
        words, lower = _decode_hex(keys.cast(pa.string()))
    except ValueError:
        return None
    return words if lower else None


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 128-bit hash per key string, as (n, 2) uint64 words; the same key always gives the same words.

    Keys that are already 128-bit hex hashes (episode ids, content keys: 32 lowercase hex digits) are their own
    hash, decoded without a Python loop; any other key is hashed with MD5 (its UTF-8 bytes) in one DuckDB query,
    vectorised and stable across library versions (a sidecar outlives the process; Polars' hash may change with
    a release). Not for secrecy: a collision between two different keys has probability ~n^2 / 2^129, about
    1e-25 at 10 million keys."""
    keys = _combined(keys).cast(pa.string())
    if keys.null_count:
        raise ValueError("keys must not be null")
    if len(keys) == 0:
        return np.zeros((0, 2), np.uint64)
    try:  # the common case, every key a hash: decoded and checked in two C calls, no regex over every key
        words, lower = _decode_hex(keys)
        if lower:
            return words
    except ValueError:
        pass
    hexy = np.asarray(pc.match_substring_regex(keys, _HEX32).to_numpy(zero_copy_only=False), dtype=bool)
    if hexy.all():
        return key_words(keys)
    out = np.zeros((len(keys), 2), np.uint64)
    if hexy.any():
        out[hexy] = key_words(keys.filter(pa.array(hexy)))
    other = ~hexy
    out[other] = _md5_words(keys.filter(pa.array(other)))
    return out


def _md5_words(keys: pa.Array) -> np.ndarray:
    """MD5 of each key's bytes as (n, 2) uint64 words: the digest's two 8-byte halves, each little-endian (as
    `key_words` reads hex). DuckDB's md5_number is that digest as a little-endian 128-bit integer."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET preserve_insertion_order = true")  # the default; the rows must come back in key order
        k = pa.table({"k": keys.cast(pa.binary())})  # noqa: F841 - scanned by name below
        t = con.execute(
            "SELECT (h & 18446744073709551615::UHUGEINT)::UBIGINT AS first, (h >> 64)::UBIGINT AS second"
            " FROM (SELECT md5_number(k) AS h FROM k)"
        ).to_arrow_table()
    finally:
        con.close()
    return np.column_stack([t.column("first").to_numpy(), t.column("second").to_numpy()]).astype(np.uint64)


def sort_words(words: np.ndarray) -> np.ndarray:
    """Rows sorted by (high, low), as every sidecar and lookup run is."""
    if len(words) < 2:
        return np.ascontiguousarray(words, dtype=np.uint64).reshape(-1, 2)
    return np.ascontiguousarray(words[sort_order(words)])


def sort_order(words: np.ndarray) -> np.ndarray:
    """The row order that sorts (n, 2) words by (high, low). One sort on the high word, then the rows that tie on it
    sorted by both (2-3x faster than a two-key lexsort on hash keys, where ties are rare); keys that mostly share
    high words take the lexsort."""
    if len(words) < 2:
        return np.arange(len(words))
    order = np.argsort(words[:, 0])
    hi = words[order, 0]
    tie = hi[1:] == hi[:-1]
    n_tied = int(np.count_nonzero(tie))
    if n_tied > len(words) // 8:
        return np.lexsort((words[:, 1], words[:, 0]))
    if n_tied:
        t = np.flatnonzero(np.r_[tie, False] | np.r_[False, tie])  # the tied rows: blocks in high-word order
        sub = order[t]
        order[t] = sub[np.lexsort((words[sub, 1], words[sub, 0]))]
    return order


def contains(
    runs: Iterable[np.ndarray],
    words: np.ndarray,
    order: np.ndarray | None = None,
    prefilter: HighWordFilter | None = None,
) -> np.ndarray:
    """Which rows of `words` ((n, 2) uint64) occur in any of `runs` (each sorted by `sort_words`): an exact
    128-bit match, vectorised for any key distribution. `order`: a permutation that sorts `words` by the high word,
    when the caller has one (`sort_order`'s does), saving the sort. `prefilter`: a HighWordFilter over these runs;
    only the queries it passes are searched.

    A binary search on the high word finds each query's range of equal high words; ranges of more than one entry
    (keys sharing their first 16 hex digits: sequential or time-ordered ids) are searched on the low word by
    `_search_low`, so a million keys with one common prefix cost about what random ones do."""
    found = np.zeros(len(words), dtype=bool)
    if not len(words):
        return found
    if prefilter is not None:
        maybe = prefilter.candidates(words)
        if len(maybe) < len(words):
            runs = list(runs)
            found[maybe] = contains(runs, words[maybe]) if len(maybe) and runs else False
            return found
    if order is None:  # sorted queries: the searches walk each run once
        order = np.argsort(words[:, 0], kind="stable")
    q = words[order]
    qhi, qlo = np.ascontiguousarray(q[:, 0]), np.ascontiguousarray(q[:, 1])
    hit = np.zeros(len(q), dtype=bool)
    for run in runs:
        m = len(run)
        if not m:
            continue
        hi, lo = np.ascontiguousarray(run[:, 0]), np.ascontiguousarray(run[:, 1])
        left = np.searchsorted(hi, qhi, "left")
        right = np.searchsorted(hi, qhi, "right")
        tied = np.flatnonzero(right - left > 1)
        if len(tied):
            left[tied] = _search_low(lo, left[tied], right[tied], qlo[tied])
        at = np.minimum(left, m - 1)
        hit |= (hi[at] == qhi) & (lo[at] == qlo)
    found[order] = hit
    return found


class HighWordFilter:
    """A filter over the high words of many runs: one byte per bucket of the high word's top bits, set where some
    stored key falls. A query whose bucket is empty is in no run, so `contains` searches the runs only for the rest:
    with a run per pile file, the searches grew with the lake (30 runs at 3M episodes: 0.27 CPU-s a round), the
    filter costs one pass over the stored words when built and one lookup per query. No false negatives; keys that
    share their top bits (sequential ids) pass it and are searched as before."""

    def __init__(self, runs: Iterable[np.ndarray], expected: int) -> None:
        bits = int(min(26, max(12, np.ceil(np.log2(max(expected, 1) * 8)))))  # about 8 buckets per key
        self._shift = np.uint64(64 - bits)
        self._table = np.zeros(1 << bits, dtype=bool)
        for run in runs:
            self.add(run)

    def add(self, run: np.ndarray) -> None:
        if len(run):
            self._table[run[:, 0] >> self._shift] = True

    def candidates(self, words: np.ndarray) -> np.ndarray:
        """Rows of `words` that may be in a run (the others are in none)."""
        return np.flatnonzero(self._table[words[:, 0] >> self._shift])


#: Ranges of equal high words longer than this get one np.searchsorted each (at most len(run) / TIE_RUN calls);
#: shorter ones are bisected together, at most log2(TIE_RUN) + 1 vectorised rounds.
TIE_RUN = 1024


def _search_low(lo: np.ndarray, left: np.ndarray, right: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each query i, the first position in lo[left[i]:right[i]] (a sorted slice) whose value is >= x[i]."""
    at = left.copy()
    big = np.flatnonzero(right - left > TIE_RUN)
    if len(big):
        starts = left[big]
        order = np.lexsort((x[big], starts))  # grouped by range, each group's queries sorted (a walk, not jumps)
        big, starts = big[order], starts[order]
        bounds = np.flatnonzero(np.r_[True, starts[1:] != starts[:-1], True])
        for b0, b1 in zip(bounds[:-1], bounds[1:], strict=True):
            i = big[b0:b1]
            a, b = left[i[0]], right[i[0]]
            at[i] = a + np.searchsorted(lo[a:b], x[i])
    small = np.flatnonzero(right - left <= TIE_RUN)
    a, b, v = left[small], right[small], x[small]
    while len(small):
        done = a >= b
        at[small[done]] = a[done]
        keep = ~done
        small, a, b, v = small[keep], a[keep], b[keep], v[keep]
        mid = (a + b) // 2
        go = lo[mid] < v
        a = np.where(go, mid + 1, a)
        b = np.where(go, b, mid)
    return at


@dataclass(frozen=True)
class FileIndex:
    """One kind of sidecar: which columns of a data file it reads and how they become key words."""

    name: str  # folder under _index/<table>/; include anything the words depend on (a version)
    columns: tuple[str, ...]
    build: Callable[[pa.Table], np.ndarray]  # a data file's rows (those columns) -> (n, 2) uint64 words

    @property
    def folder(self) -> str:
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", self.name)


def key_index(key: tuple[str, ...]) -> FileIndex:
    """The index of a table's primary key (the key string `Lake.append` compares, hashed by `key_hashes`)."""
    return FileIndex(f"{KEY_INDEX_PREFIX}{'+'.join(key)}", key, lambda t: key_hashes(key_strings(t, key)))


def sidecar_rel(table: str, index: FileIndex, data_file: str) -> str:
    return f"{INDEX_ROOT}/{table}/{index.folder}/{data_file.rsplit('/', 1)[-1]}.npy"


def _encode(words: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(words, dtype=np.uint64), allow_pickle=False)
    return buf.getvalue()


def _decode(data: bytes | None) -> np.ndarray | None:
    if data is None:
        return None
    try:
        a = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError):  # a torn or foreign file: rebuilt from the data file
        return None
    if a.dtype != np.uint64 or a.ndim != 2 or a.shape[1] != 2:
        return None
    return a


def _nbytes(v: Any) -> int:
    return v.nbytes if isinstance(v, np.ndarray) else sum(_nbytes(x) for x in v if isinstance(x, np.ndarray))


#: Loaded runs and segments by "<lake>|<object key>" (least recently used dropped first beyond CACHE_BYTES).
_CACHE: LRUCache[str, Any] = LRUCache(CACHE_BYTES, getsizeof=_nbytes)
_LOCK = threading.Lock()


def _cached(k: str) -> Any:
    with _LOCK:
        return _CACHE.get(k)


def _remember(k: str, v: Any) -> None:
    with _LOCK:
        if _nbytes(v) <= CACHE_BYTES:
            _CACHE[k] = v


def forget() -> None:
    """Drop every loaded run (what a new process would start from)."""
    with _LOCK:
        _CACHE.clear()


def build_run(fragment: ds.ParquetFileFragment, index: FileIndex, schema: pa.Schema) -> np.ndarray:
    """The sorted words of one data file, read from the file itself."""
    t = fragment.to_table(schema=schema, columns=list(index.columns))
    return sort_words(index.build(t))


def store_run(lake: Any, table: str, index: FileIndex, data_file: str, rows: pa.Table) -> None:
    """Write the sidecar of a data file from its rows, as the writer has them in memory (before its commit: a
    commit that then fails leaves an orphan sidecar, removed by `flywheel maintain`, never a wrong one)."""
    _put_run(lake, sidecar_rel(table, index, data_file), sort_words(index.build(rows.select(list(index.columns)))))


def _put_run(lake: Any, rel: str, words: np.ndarray) -> None:
    lake.objects.put_bytes(rel, _encode(words))
    _remember(f"{lake.uri}|{rel}", words)


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _file_names(dt: Any) -> list[str]:
    """The data files of `dt`'s snapshot, by name, in log order: from the Delta log, no Parquet footer read."""
    return list(dict.fromkeys(_name(p) for p in dt.file_uris()))


def _load(lake: Any, rel: str, decode: Callable[[bytes | None], Any]) -> Any:
    ck = f"{lake.uri}|{rel}"
    v = _cached(ck)
    if v is None:
        v = decode(lake.objects.get_bytes(rel))
        if v is not None:
            _remember(ck, v)
    return v


def _decode_segment(data: bytes | None) -> tuple[frozenset[str], np.ndarray] | None:
    if data is None:
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            files, words = frozenset(str(f) for f in z["files"]), z["words"]
    except (ValueError, OSError, EOFError, KeyError):
        return None
    return (files, words) if words.dtype == np.uint64 and words.ndim == 2 and words.shape[1:] == (2,) else None


def _segments(lake: Any, table: str, index: FileIndex) -> list[tuple[str, frozenset[str], np.ndarray]]:
    """The index's merged segments: (object key, data files covered, sorted words), largest first."""
    out = []
    for rel in lake.objects.list(f"{INDEX_ROOT}/{table}/{index.folder}/{SEGMENTS}/"):
        seg = _load(lake, rel, _decode_segment)
        if seg is not None:
            out.append((rel, *seg))
    return sorted(out, key=lambda s: (-len(s[1]), s[0]))


def _discard(lake: Any, rel: str) -> None:
    """Delete a sidecar a merge made redundant; failing to is harmless (maintain drops it later)."""
    from storage.errors import LakeError

    try:
        lake.objects.delete(rel)
    except (LakeError, OSError):
        pass


def _segment_rel(table: str, index: FileIndex, files: Iterable[str]) -> str:
    seg_id = hashlib.sha256("\n".join(sorted(files)).encode()).hexdigest()[:32]
    return f"{INDEX_ROOT}/{table}/{index.folder}/{SEGMENTS}/{seg_id}.npz"


def _store_segment(
    lake: Any, table: str, index: FileIndex, files: Iterable[str], words: Iterable[np.ndarray]
) -> np.ndarray:
    """Merge runs into one segment covering `files` (named by them, so writing it twice writes the same object)."""
    names = sorted(files)
    merged = sort_words(np.concatenate(list(words)))
    rel = _segment_rel(table, index, names)
    buf = io.BytesIO()
    np.savez(buf, files=np.array(names), words=merged)
    lake.objects.put_bytes(rel, buf.getvalue())
    _remember(f"{lake.uri}|{rel}", (frozenset(names), merged))
    return merged


def runs(lake: Any, table: str, index: FileIndex, dt: Any) -> list[np.ndarray]:
    """Sorted word runs covering every data file of `dt`'s snapshot exactly once.

    Merged segments come first (one usable only while every file it covers is in the snapshot: a segment with a
    compacted-away file could claim a key the table no longer has); each remaining file has its own sidecar, built
    from the file when missing or unreadable (so only files added since the last lookup are ever read). When
    MERGE_RUNS single-file runs are left they are merged into a new segment, and when MERGE_RUNS segments are
    usable they are merged into one, so a lookup searches a few runs however many files the table has (100 runs
    of 100k keys: 0.27 s of binary search per 200k-key batch; 20 runs: about a quarter of it)."""
    # The snapshot's file names come from the log (dt.file_uris): building its Arrow dataset costs a pass over every
    # file's statistics (about 2 ms a file), which every append paid, so a table's appends grew quadratic in its
    # files (36 appends of an ingest: 1.2 of 3 s). The dataset is built only to read a file whose sidecar is missing.
    names = _file_names(dt)
    live = set(names)
    dataset: Any = None
    covered: set[str] = set()
    segs = []
    for _, files, words in _segments(lake, table, index):
        if files <= live and not files & covered:
            segs.append((files, words))
            covered |= files
    singles = []
    for name in names:
        if name in covered:
            continue
        rel = sidecar_rel(table, index, name)
        a = _load(lake, rel, _decode)
        if a is None:
            if dataset is None:
                dataset = snapshot_dataset(dt)
                frags = {_name(f.path): f for f in dataset.get_fragments()}
            a = build_run(frags[name], index, dataset.schema)
            _put_run(lake, rel, a)
        singles.append((name, a))
    # Merged runs replace what they cover (a reader that still wanted one rebuilds it from the data files).
    if len(singles) >= MERGE_RUNS:
        files = [n for n, _ in singles]
        segs.append((frozenset(files), _store_segment(lake, table, index, files, [a for _, a in singles])))
        for n in files:
            _discard(lake, sidecar_rel(table, index, n))
        singles = []
    if len(segs) >= MERGE_RUNS:
        old = {_segment_rel(table, index, fs) for fs, _ in segs}
        files = [f for fs, _ in segs for f in fs]
        segs = [(frozenset(files), _store_segment(lake, table, index, files, [w for _, w in segs]))]
        for rel in old - {_segment_rel(table, index, segs[0][0])}:
            _discard(lake, rel)
    return [w for _, w in segs] + [a for _, a in singles]


def fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser (a bijection that spreads every input bit), elementwise on uint64."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def digest(words: np.ndarray) -> tuple[int, int, int]:
    """An order-free digest of a multiset of words: (count, two independent 64-bit sums of mixed rows). Digests of
    parts add up to the digest of the whole, so a merged segment is checked against its files without sorting."""
    if not len(words):
        return (0, 0, 0)
    hi, lo = words[:, 0], words[:, 1]
    with np.errstate(over="ignore"):
        a = fmix64(hi ^ fmix64(lo + np.uint64(0x9E3779B97F4A7C15)))
        b = fmix64(lo ^ fmix64(hi + np.uint64(0xD1B54A32D192ED03)))
    return (len(words), int(a.sum(dtype=np.uint64)), int(b.sum(dtype=np.uint64)))


def add_digests(x: tuple[int, int, int], y: tuple[int, int, int]) -> tuple[int, int, int]:
    m = (1 << 64) - 1
    return (x[0] + y[0], (x[1] + y[1]) & m, (x[2] + y[2]) & m)


def _sorted(words: np.ndarray) -> bool:
    hi, lo = words[:, 0], words[:, 1]
    return bool(((hi[1:] > hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] >= lo[:-1]))).all())


def verify(lake: Any, table: str, index: FileIndex, dt: Any) -> list[str]:
    """Stored sidecars and segments of the snapshot's files that differ from the words the files' rows give (for
    `flywheel check`): file names, or `segment <key>`. A file without a sidecar is fine (built when needed).

    Each stored run must be sorted and have the digest of its files' words (`digest`: the same multiset, up to a
    2^-128 chance), so the check reads every key once and sorts nothing (exact comparisons sorted 20M words at
    10M episodes and made `flywheel check` grow faster than the lake)."""
    dataset = snapshot_dataset(dt)
    frags = {_name(f.path): f for f in dataset.get_fragments()}
    digests: dict[str, tuple[int, int, int]] = {}

    def digest_of(name: str) -> tuple[int, int, int]:
        if name not in digests:
            t = frags[name].to_table(schema=dataset.schema, columns=list(index.columns))
            digests[name] = digest(index.build(t))
        return digests[name]

    def sound(stored: np.ndarray | None, expected: tuple[int, int, int]) -> bool:
        return stored is not None and _sorted(stored) and digest(stored) == expected

    bad = []
    for name in frags:
        data = lake.objects.get_bytes(sidecar_rel(table, index, name))
        if data is not None and not sound(_decode(data), digest_of(name)):
            bad.append(name)
    for rel in lake.objects.list(f"{INDEX_ROOT}/{table}/{index.folder}/{SEGMENTS}/"):
        seg = _decode_segment(lake.objects.get_bytes(rel))
        if seg is None:
            bad.append(f"segment {_name(rel)}")
            continue
        if not seg[0] <= frags.keys():
            continue  # covers a file no longer in the table: never used, dropped by maintain
        total = (0, 0, 0)
        for n in seg[0]:
            total = add_digests(total, digest_of(n))
        if not sound(seg[1], total):
            bad.append(f"segment {_name(rel)}")
    return bad


def stale_sidecars(lake: Any, table: str, dt: Any) -> list[str]:
    """Sidecars and segments (object keys) of every index of `table` that cover a data file no longer in `dt`'s
    snapshot, and every one of a retired index format."""
    live = set(_file_names(dt))
    out = []
    for rel in lake.objects.list(f"{INDEX_ROOT}/{table}/"):
        if rel.split("/")[2].startswith(_RETIRED_PREFIXES):
            out.append(rel)
        elif f"/{SEGMENTS}/" in rel:
            seg = _decode_segment(lake.objects.get_bytes(rel))
            if seg is None or not seg[0] <= live:
                out.append(rel)
        elif _name(rel).removesuffix(".npy") not in live:
            out.append(rel)
    return out
