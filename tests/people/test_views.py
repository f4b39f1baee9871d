"""Analyst views: every column documented, the convenience views give the known numbers on a local and an S3
lake, version pins reach through views, and `flywheel sql` / `flywheel shell` see the views."""

from __future__ import annotations

import subprocess
import sys

import pytest

from schemas.tables import STEP, TABLES
from storage.analyst_views import VIEW_NAMES, VIEWS, polars_storage_options, scan_table, tables_behind
from tests.people.helpers import populate


def test_every_column_of_every_table_and_view_is_documented(lake) -> None:
    con = lake.duckdb()
    rows = con.sql("SELECT table_name, column_name, description FROM lake_columns").fetchall()
    names = {r[0] for r in rows}
    assert set(TABLES) | set(VIEW_NAMES) <= names
    undocumented = [(t, c) for t, c, d in rows if not d]
    assert undocumented == []
    # the views' descriptions are in the catalog too
    described = dict(con.sql("SELECT name, description FROM lake_views").fetchall())
    assert all(described[n] for n in [*TABLES, *VIEW_NAMES])


def test_views_on_a_subset_of_tables_only_where_they_can_be_served(lake) -> None:
    con = lake.duckdb(tables=["verdicts"])
    views = {r[0] for r in con.sql("SELECT name FROM lake_views").fetchall()}
    assert views == {"verdicts", "verdict_reasons", "episode_validators"}


def test_version_pins_reach_the_tables_behind_a_view() -> None:
    from storage.views import referenced_tables

    assert referenced_tables("SELECT * FROM pass_rates") >= {"sft", "ct"}
    assert tables_behind(["steps"]) == {"episodes", "sft", "ct"}
    assert {v.name for v in VIEWS} == set(VIEW_NAMES)


def test_convenience_views_give_the_known_numbers(any_lake) -> None:
    exp = populate(any_lake, rounds=(1, 2), per_source=6)
    con = any_lake.duckdb()
    rates = {
        (r, s): (n, k) for r, s, n, k in con.sql("SELECT round, source, n_routed, n_pass FROM pass_rates").fetchall()
    }
    for r in (1, 2):
        assert rates[(r, "all")] == (exp["n_routed"][r], exp["n_pass"][r])
        assert rates[(r, "think_aloud")] == (6, 4)  # i % 3 == 2 fails: 2 of 6
    assert con.sql("SELECT count(*) FROM steps").fetchone()[0] == exp["n_steps"]
    assert con.sql("SELECT count(*) FROM steps WHERE pile = 'sft'").fetchone()[0] == 2 * exp["n_sft"]
    growth = con.sql("SELECT round, sft_added, sft_size, ct_size FROM pile_growth ORDER BY round").fetchall()
    assert growth == [(1, 12, 12, 6), (2, 12, 24, 12)]
    over = con.sql(
        "SELECT annotator, sum(n_overridden), sum(n_decisions) FROM override_rates GROUP BY 1 ORDER BY 1"
    ).fetchall()
    # interactive episodes: even i by anon-a, first step overridden; 2 decided steps per episode
    assert over == [("anon-a", 6, 12), ("anon-b", 0, 12)]
    reasons = con.sql("SELECT reason, sum(n) FROM verdict_reasons WHERE NOT passed GROUP BY 1").fetchall()
    assert reasons == [("env_failed", exp["n_ct"])]
    status = dict(con.sql("SELECT session_id, reason FROM session_status WHERE status = 'quarantined'").fetchall())
    assert status == {"broken-abc": "audio_undecodable: cannot decode audio"}
    flagged = dict(con.sql("SELECT session_id, reason FROM session_status WHERE reason <> ''").fetchall())
    assert flagged["ta-1-1"] == "event_bad_field: x missing" and flagged["ta-1-0"] == "no_audio"
    audited = con.sql("SELECT count(*), sum(good::INT) FROM audited").fetchone()
    assert audited == (4 * 3, 9)  # round 1's 12 SFT episodes, every fourth judged bad


def test_polars_scan_delta_reads_the_same_rows(any_lake) -> None:
    import polars as pl

    exp = populate(any_lake, rounds=(1,), per_source=3)
    opts = polars_storage_options(any_lake)
    if any_lake.uri.scheme == "s3":
        assert opts and all(k == k.lower() for k in opts) and "aws_endpoint_url" in opts
    else:
        assert opts == {}
    got = pl.scan_delta(any_lake.table_uri("sft"), storage_options=opts or None).select(pl.len()).collect().item()
    assert got == exp["n_sft"]
    old = scan_table(any_lake, "sft", version=0).select(pl.len()).collect().item()
    assert old == 0  # time travel: version 0 is the empty table made by init


def _run(args: list[str], env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "flywheel", *args], capture_output=True, text=True, input=stdin,
        env={**os.environ, **(env or {}), "COLUMNS": "200"}, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("where", ["local", "s3"])
def test_flywheel_sql_and_shell_see_the_views(where: str, request: pytest.FixtureRequest) -> None:
    lake = request.getfixturevalue("lake" if where == "local" else "s3_lake")
    env = request.getfixturevalue("moto_server").env() if where == "s3" else {}
    populate(lake, rounds=(1,), per_source=3)
    r = _run(
        [
            "sql",
            "SELECT round, source, n_pass FROM pass_rates WHERE source = 'all'",
            "--lake",
            str(lake.uri),
            "-f",
            "csv",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    import csv

    assert list(csv.reader(r.stdout.strip().splitlines())) == [["round", "source", "n_pass"], ["1", "all", "6"]]
    shell_in = "SELECT 'n=' || count(*) AS n FROM steps;\nSELECT 'cols=' || count(*) AS c FROM lake_columns WHERE table_name = 'steps';\n"
    r = _run(["shell", "--lake", str(lake.uri)], env, stdin=shell_in)
    assert r.returncode == 0, r.stderr
    assert "n=18" in r.stdout  # 9 episodes x 2 steps
    assert f"cols={12 + len(STEP)}" in r.stdout  # 12 episode-context columns + every step field, all documented
