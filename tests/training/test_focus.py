"""Annotation follows the model's failures: a round's annotation tasks are split over levels by the previous
round's held-out failure rates."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from flows.stages import focus_split


class Rounds:
    """The one table focus_split reads, as a lake would return it."""

    def __init__(self, rates: dict | None, round: int = 0, by: str = "level") -> None:
        bd = (
            {"eval": {f"by_{by}": {str(k): {"rate": v, "n": 28} for k, v in rates.items()}}}
            if rates is not None
            else {}
        )
        self.table = pa.table({"round": pa.array([round], pa.int32()), "breakdown": [json.dumps(bd)]})

    def read(self, name: str, columns: list[str] | None = None, filter=None) -> pa.Table:
        assert name == "rounds"
        return self.table if filter is None else self.table.filter(filter)


def test_weak_levels_get_more_tasks_and_every_level_keeps_a_floor() -> None:
    split = focus_split(Rounds({1: 0.8, 2: 0.4, 3: 0.2, 4: 0.0, 5: 0.0}), 0, 480)
    assert sum(split.values()) == 480
    assert split[1] < split[2] < split[3] < split[4] == split[5]
    assert split[1] >= int(0.25 * 480 / 5)  # the floor: a quarter of the even share


def test_miniwob_splits_over_its_tasks() -> None:
    """A MiniWoB++ task is one level: effort follows the per-task (family) failure rates instead."""
    rates = {"click-button": 0.9, "enter-text": 0.6, "use-autocomplete": 0.0}
    split = focus_split(Rounds(rates, by="family"), 0, 192, by="family")
    assert sum(split.values()) == 192 and split["click-button"] < split["enter-text"] < split["use-autocomplete"]
    assert focus_split(Rounds(rates, by="family"), 0, 192) is None  # no per-level rates in that breakdown


def test_no_split_without_per_level_rates_or_with_one_level() -> None:
    assert focus_split(Rounds(None), 0, 100) is None
    assert focus_split(Rounds({1: 0.5}), 0, 100) is None  # MiniWoB++: one level
    assert focus_split(Rounds({1: 0.5, 2: 0.1}), 3, 100) is None  # no row for round 3


@given(st.dictionaries(st.integers(1, 5), st.floats(0, 1), min_size=2, max_size=5), st.integers(1, 1000))
def test_the_split_always_hands_out_exactly_n_tasks(rates: dict[int, float], n: int) -> None:
    split = focus_split(Rounds(rates), 0, n)
    assert sum(split.values()) == n and set(split) <= set(rates) and all(k > 0 for k in split.values())
