"""Two `route` runs of one round, interleaved deterministically: the later-started run commits first (the
earlier run's progress hook runs it to the end between two of its chunks). No verdict key may be stored twice,
and `flywheel check` counts duplicates exactly."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from deltalake import write_deltalake

from ingest.land import land
from schemas.tables import spec
from storage.delta import conform
from tests.validators.factory import make_episode, store_png
from validators.lake_check import check_lake
from validators.routing import route_round


def _verdict_keys(lake) -> tuple[int, int]:
    t = lake.read("verdicts", ["episode_id", "validator", "version"])
    return t.num_rows, t.group_by(["episode_id", "validator", "version"]).aggregate([]).num_rows


def test_later_run_committing_first_does_not_duplicate_verdicts(lake):
    shot = store_png(lake)
    land(lake, [make_episode(shot, i=i, round=1) for i in range(12)])
    ran_b = []

    def hook(stage, info):  # between run A's first and second chunk: run B, started later, to completion
        if stage == "verdicts_written" and not ran_b:
            ran_b.append(route_round(lake, 1, chunk_size=4))

    route_round(lake, 1, chunk_size=4, progress=hook)
    assert ran_b and ran_b[0].routed_now > 0  # B did route (the race happened)
    n, distinct = _verdict_keys(lake)
    assert n == distinct
    report = check_lake(lake, media=False)
    assert report.ok, [v.line() for v in report.violations]


def test_check_counts_every_duplicate_key(lake):
    """More duplicated keys than any cap (the old query stopped at 100,000): the count is the true one."""
    n = 120_000
    rows = pa.table(
        {
            "quarantine_id": pa.array([f"q{i:07d}" for i in range(n)]),
            "source": pa.repeat("rollout", n),
            "landed_uri": pa.repeat("file:///x", n),
            "error_type": pa.repeat("bad_json", n),
            "error": pa.repeat("x", n),
            "quarantined_at": pa.repeat(pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC")), n),
        }
    )
    assert lake.append("quarantine", rows) == n
    schema = lake.delta("quarantine").schema().to_arrow()
    # a second copy committed behind the lake's back (what the route race used to leave)
    write_deltalake(
        lake.table_uri("quarantine"), conform(rows, spec("quarantine")).cast(pa.schema(schema)), mode="append"
    )
    report = check_lake(lake, media=False)
    (v,) = [v for v in report.violations if v.invariant == "duplicate_key"]
    assert v.table == "quarantine" and v.count == n and f"({n:,} extra row(s))" in v.message
