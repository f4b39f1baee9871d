"""The batch id is the hash of the batch's sorted episode ids, whichever way it is computed: content-hash ids take a
numeric sort, any other id Arrow's string sort, and both must give the id the definition gives."""

import hashlib

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from validators.quality import batch_id

hex_ids = st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), min_size=1, max_size=60)
other_ids = st.lists(st.text(min_size=0, max_size=40), min_size=1, max_size=60)


def by_definition(ids: list[str]) -> str:
    return hashlib.sha256("".join(i + "\x1f" for i in sorted(ids)).encode()).hexdigest()[:32]


@settings(max_examples=200, deadline=None)
@given(hex_ids, st.integers(0, 5), st.data())
def test_content_hash_ids_give_the_defined_id_in_any_order_and_chunking(ids, cut, data) -> None:
    ids = ids + ids[:cut]  # duplicates
    shuffled = data.draw(st.permutations(ids))
    want = by_definition(ids)
    assert batch_id(pa.array(shuffled)) == want
    k = len(shuffled) // 2
    assert (
        batch_id(pa.chunked_array([pa.array(shuffled[:k], pa.string()), pa.array(shuffled[k:], pa.string())])) == want
    )
    padded = pa.array(["x", *shuffled])  # a slice: offsets that do not start at 0
    assert batch_id(padded.slice(1)) == want


@settings(max_examples=200, deadline=None)
@given(other_ids)
def test_any_other_ids_give_the_defined_id(ids) -> None:
    assert batch_id(pa.array(ids)) == by_definition(ids)


def test_upper_case_hex_is_sorted_as_text() -> None:
    ids = ["A" + "0" * 31, "a" + "0" * 31, "0" * 31 + "f", "F" * 32]
    assert batch_id(pa.array(ids)) == by_definition(ids)
