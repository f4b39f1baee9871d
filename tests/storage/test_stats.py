"""File statistics must never hide rows from key lookups (a regression: long string keys were appended twice)."""

from datetime import UTC, datetime

import pyarrow.compute as pc
import pytest


@pytest.mark.parametrize("key", ["short-id", "ia-" + "x" * 200, "é" * 70])
def test_long_string_keys_are_found_and_not_appended_twice(lake, key: str) -> None:
    row = {"session_id": key, "source": "interactive", "status": "landed", "ingested_at": datetime.now(UTC),
           "duration_s": float("nan")}  # fmt: skip
    assert lake.append("sessions", [row]) == 1
    assert lake.append("sessions", [row]) == 0
    assert lake.read("sessions", filter=pc.field("session_id") == key).num_rows == 1
    assert lake.count("sessions") == 1
