"""bench_scale compares rounds run minutes apart: its rate figures are corrected by a reference timing taken beside
each round, so a slow spell of the host does not read as a cost that grows with the lake."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bench.bench_scale import _rate_figure, reference_seconds


def _point(episodes: int, route: float, ref: float | None) -> dict:
    return {"episodes": episodes, "route_rate": route, "ref_s": ref}


def test_a_slow_spell_that_stretches_the_reference_as_much_cancels_out() -> None:
    a = _point(1_000_000, 100_000.0, 0.20)
    slow = _point(3_000_000, 75_000.0, 0.20 / 0.75)  # every piece of work 1/0.75 longer: the lake cost nothing
    fig = _rate_figure(a, slow, "route_rate", "route", "")
    assert abs(fig.ratio - 1.0) < 1e-9 and fig.ok
    assert "raw 75,000 vs 100,000 episodes/s = 0.75x" in fig.note
    grew = _point(3_000_000, 60_000.0, 0.20)  # the host kept its speed and routing slowed: that still fails
    assert not _rate_figure(a, grew, "route_rate", "route", "").ok


def test_points_without_a_reference_fall_back_to_the_raw_rates() -> None:
    fig = _rate_figure(_point(1_000_000, 100_000.0, None), _point(3_000_000, 90_000.0, 0.2), "route_rate", "route", "")
    assert abs(fig.ratio - 0.9) < 1e-9 and "no reference timing" in fig.note


def test_the_reference_is_a_real_write_and_read(tmp_path: Path) -> None:
    t = pa.table({"x": list(range(50_000))})
    s = reference_seconds(t, tmp_path / "ref.parquet")
    assert s > 0 and not (tmp_path / "ref.parquet").exists()
