"""Key indexes beside the data files (storage/keyindex.py): exact lookups, and a cache that can never hide a key."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import keyindex
from storage.keyindex import contains, key_hashes, key_index, sidecar_rel, sort_words
from storage.maintain import maintain
from tests.storage.data import episodes
from validators.lake_check import check_lake


def _sidecars(lake, table: str = "episodes") -> list[str]:
    return lake.objects.list(f"{keyindex.INDEX_ROOT}/{table}/")


def test_key_hashes_are_the_hex_itself_or_md5_per_key() -> None:
    hexkeys = pa.array(["0123456789abcdef" * 2, "f" * 32])
    words = key_hashes(hexkeys)
    assert words[0, 0] == int.from_bytes(bytes.fromhex("0123456789abcdef"), "little")
    other = pa.array(["s1", "session/2", "F" * 32, ""])  # upper-case hex is not a hash of ours: hashed
    mixed = pa.array(["s1", "f" * 32, "session/2"])
    a, b = key_hashes(other), key_hashes(mixed)
    assert (
        (b[0] == a[0]).all() and (b[1] == words[1]).all() and (b[2] == a[1]).all()
    )  # a key's words never depend on its batch
    assert len({tuple(r) for r in a}) == 4
    assert (key_hashes(other) == a).all()
    for key, row in zip(other.to_pylist(), a, strict=True):  # the vectorised hash is MD5 of the key's UTF-8 bytes
        assert row.astype("<u8").tobytes() == hashlib.md5(key.encode()).digest()
    upper = key_hashes(pa.array(["F" * 32, "0123456789ABCDEF" * 2]))  # a whole batch of upper-case hex: hashed too
    assert upper[0].astype("<u8").tobytes() == hashlib.md5(b"F" * 32).digest() and (upper[0] != words[1]).any()
    odd = pa.array(["a\x00b", "\x1f", "é" * 3])  # NUL, the key separator, non-ASCII
    assert [r.astype("<u8").tobytes() for r in key_hashes(odd)] == [
        hashlib.md5(k.encode()).digest() for k in odd.to_pylist()
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**64 - 1)), max_size=40),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**64 - 1)), max_size=40),
    st.integers(1, 3),
)
def test_contains_is_exact_membership(
    stored: list[tuple[int, int]], queries: list[tuple[int, int]], n_runs: int
) -> None:
    """High words drawn from 0..3 so most share one: the low word must decide."""
    queries = queries + stored[: len(stored) // 2]
    arr = np.array(stored, dtype=np.uint64).reshape(-1, 2)
    runs = [sort_words(arr[i::n_runs]) for i in range(n_runs)]
    q = np.array(queries, dtype=np.uint64).reshape(-1, 2)
    assert contains(runs, q).tolist() == [t in set(stored) for t in queries]


@settings(max_examples=80, deadline=None)
@given(
    st.integers(0, 16**16 - 1),
    st.lists(st.integers(0, 2**64 - 1), max_size=300),
    st.lists(st.integers(0, 2**64 - 1), max_size=100),
    st.sampled_from([1, 3, 1024]),
    st.integers(1, 3),
)
def test_contains_agrees_with_a_set_for_keys_sharing_a_prefix(
    prefix: int, stored: list[int], other: list[int], tie_run: int, n_runs: int
) -> None:
    """Adversarial ids: 32 hex digits whose first 16 are the same (sequential or time-ordered ids), so every key
    has one high word. tie_run moves the cut between the two ways ties are searched (one search per long range,
    bisection of short ones), so both are exercised at these sizes."""
    ids = [f"{prefix:016x}{v:016x}" for v in stored]
    queries = ids[::2] + [f"{prefix:016x}{v:016x}" for v in other] + [f"{prefix ^ 1:016x}{v:016x}" for v in other[:9]]
    words = key_hashes(pa.array(ids, pa.string())) if ids else np.zeros((0, 2), np.uint64)
    runs = [sort_words(words[i::n_runs]) for i in range(n_runs)]
    q = key_hashes(pa.array(queries, pa.string()))
    saved, keyindex.TIE_RUN = keyindex.TIE_RUN, tie_run
    try:
        got = contains(runs, q)
    finally:
        keyindex.TIE_RUN = saved
    assert got.tolist() == [k in set(ids) for k in queries]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=60), st.integers(0, 40))
def test_sort_words_orders_rows_by_high_then_low_word(rows: list[tuple[int, int]], n_tied: int) -> None:
    """Few ties take the tie-fixing path, many (a shared high word) the lexsort: both give Python's order."""
    rows = rows + [(7, v) for _, v in rows[:n_tied]]
    got = sort_words(np.array(rows, dtype=np.uint64).reshape(-1, 2))
    assert [tuple(map(int, r)) for r in got] == sorted(rows)


def test_append_writes_sidecars_and_rebuilds_a_lost_or_torn_one(any_lake) -> None:
    first, second = episodes(40), episodes(40, start=40)
    assert any_lake.append("episodes", first) == 40
    assert any_lake.append("episodes", second) == 40
    assert len(_sidecars(any_lake)) == 2  # written with each data file
    assert any_lake.append("episodes", episodes(80)) == 0
    lost, torn = _sidecars(any_lake)
    any_lake.objects.delete(lost)
    any_lake.objects.put_bytes(torn, b"not an array")
    keyindex.forget()  # a new process: only what is stored
    assert not check_lake(any_lake, media=False).ok  # the torn sidecar is reported...
    assert (
        any_lake.append("episodes", pa.concat_tables([first, second, episodes(5, start=80)])) == 5
    )  # ...never trusted
    assert any_lake.count("episodes") == 85
    assert len(_sidecars(any_lake)) == 3  # both restored, and the new file's
    rep = check_lake(any_lake, media=False)
    assert rep.ok, [v.line() for v in rep.violations]
    assert "key_index_mismatch" in rep.checked


def test_a_lookup_reads_the_file_list_from_the_log_not_the_dataset(lake, monkeypatch) -> None:
    """With every sidecar in place an append's key check builds no Arrow dataset of the snapshot (that pass over every
    file's statistics made a table's appends grow quadratic in its files); a lost sidecar still gets one, to rebuild."""
    built = []
    real = keyindex.snapshot_dataset
    monkeypatch.setattr(keyindex, "snapshot_dataset", lambda dt: built.append(dt.version()) or real(dt))
    for i in range(4):
        assert lake.append("episodes", episodes(10, start=10 * i)) == 10
    assert lake.append("episodes", episodes(40)) == 0 and built == []
    lake.objects.delete(_sidecars(lake)[0])
    keyindex.forget()
    assert lake.append("episodes", episodes(45)) == 5 and len(built) == 1
    assert lake.count("episodes") == 45


def test_check_reports_a_sidecar_that_lies(lake) -> None:
    lake.append("episodes", episodes(10))
    lake.append("episodes", episodes(10, start=10))
    dt = lake.delta("episodes")
    path = dt.to_pyarrow_dataset().get_fragments().__next__().path
    rel = sidecar_rel("episodes", key_index(("episode_id",)), path)
    lake.objects.put_bytes(rel, keyindex._encode(np.zeros((10, 2), np.uint64)))  # valid, but the wrong keys
    rep = check_lake(lake, media=False)
    assert [v.invariant for v in rep.violations] == ["key_index_mismatch"]
    assert path.rsplit("/", 1)[-1] in rep.violations[0].examples[0]


def test_maintain_drops_the_sidecars_of_compacted_files(lake) -> None:
    for i in range(3):
        lake.append("episodes", episodes(10, start=10 * i))
    assert len(_sidecars(lake)) == 3
    rep = maintain(lake, retain_hours=0)
    ep = next(t for t in rep.tables if t.table == "episodes")
    assert (ep.files_after, ep.index_files_removed) == (1, 3)
    assert _sidecars(lake) == []
    assert lake.append("episodes", episodes(31)) == 1  # the lookup builds the compacted file's sidecar
    assert len(_sidecars(lake)) == 2
    assert check_lake(lake, media=False).ok


def test_maintain_drops_the_sidecars_of_the_retired_blake2b_index(lake) -> None:
    """Version 1 primary-key indexes (`key-<columns>`, BLAKE2b) are never read again: maintain removes them."""
    lake.append("episodes", episodes(10))
    live = _sidecars(lake)
    old = live[0].replace(f"/{keyindex.KEY_INDEX_PREFIX}", "/key-")
    lake.objects.put_bytes(old, b"a version 1 sidecar")
    rep = maintain(lake, retain_hours=0, compact=False)
    assert next(t for t in rep.tables if t.table == "episodes").index_files_removed == 1
    assert _sidecars(lake) == live
    assert check_lake(lake, media=False).ok


def test_runs_are_merged_into_segments_used_only_while_their_files_are_live(lake, monkeypatch) -> None:
    """With MERGE_RUNS=3: every third lookup merges the single-file runs into a segment, and three segments into
    one. A segment that covers a file compaction replaced is not used (it could claim a key that is gone)."""
    from storage.maintain import compact_table

    monkeypatch.setattr(keyindex, "MERGE_RUNS", 3)
    ix = key_index(("episode_id",))
    for i in range(10):
        assert lake.append("episodes", episodes(10, start=10 * i)) == 10
    runs = keyindex.runs(lake, "episodes", ix, lake.delta("episodes"))
    assert sum(len(r) for r in runs) == 100 and len(runs) < 5
    assert any(f"/{keyindex.SEGMENTS}/" in rel for rel in _sidecars(lake))
    assert lake.append("episodes", episodes(105)) == 5
    assert check_lake(lake, media=False).ok
    compact_table(lake, "episodes")  # one file now; the segments cover files no longer in the table
    keyindex.forget()
    runs = keyindex.runs(lake, "episodes", ix, lake.delta("episodes"))
    assert [len(r) for r in runs] == [105]
    assert lake.append("episodes", episodes(106)) == 1
    assert maintain(lake, retain_hours=0).tables[1].index_files_removed > 0
    assert not any(f"/{keyindex.SEGMENTS}/" in rel for rel in _sidecars(lake))
    assert check_lake(lake, media=False).ok


def test_check_reports_a_segment_that_lies(lake, monkeypatch) -> None:
    monkeypatch.setattr(keyindex, "MERGE_RUNS", 2)
    for i in range(2):
        lake.append("episodes", episodes(10, start=10 * i))
    lake.append("episodes", episodes(20))  # the lookup merges the two runs
    (seg,) = [rel for rel in _sidecars(lake) if f"/{keyindex.SEGMENTS}/" in rel]
    files = [f.path.rsplit("/", 1)[-1] for f in lake.delta("episodes").to_pyarrow_dataset().get_fragments()]
    import io

    buf = io.BytesIO()
    np.savez(buf, files=np.array(sorted(files)), words=np.zeros((20, 2), np.uint64))
    lake.objects.put_bytes(seg, buf.getvalue())
    rep = check_lake(lake, media=False)
    assert [v.invariant for v in rep.violations] == ["key_index_mismatch"]
    assert "segment" in rep.violations[0].examples[0]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), min_size=1, max_size=30),
    st.integers(0, 29),
    st.integers(0, 127),
)
def test_digest_adds_up_ignores_order_and_sees_any_changed_bit(rows: list[tuple[int, int]], cut: int, bit: int) -> None:
    from storage.keyindex import add_digests, digest

    w = np.array(rows, dtype=np.uint64)
    cut = cut % len(w)
    assert add_digests(digest(w[:cut]), digest(w[cut:])) == digest(w)
    assert digest(w[::-1]) == digest(w)
    flipped = w.copy()
    flipped[cut, bit // 64] ^= np.uint64(1 << (bit % 64))
    assert digest(flipped) != digest(w)
