"""SQL given to `flywheel sql` / `flywheel shell` can only read the lake's views: no file, URL, extension, setting
or catalog change, and nothing it names outside the views is reachable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.errors import LakeError
from storage.query import run_query


@pytest.fixture(scope="module")
def sql_lake(tmp_path_factory: pytest.TempPathFactory):
    from storage import Lake
    from validators.synthetic import screenshot_pool, synthetic_rollouts

    lake = Lake.open(tmp_path_factory.mktemp("sql") / "lake", create=True)
    lake.append("episodes", synthetic_rollouts(20, 1, screenshots=screenshot_pool(lake, 2)))
    return lake


def hostile(tmp: Path, lake_root: str) -> list[str]:
    secret = tmp / "secret.csv"
    secret.write_text("k,v\nkey,hunter2\n")
    return [
        f"COPY (SELECT * FROM episodes) TO '{tmp}/out.csv'",
        f"COPY episodes TO '{tmp}/out.parquet' (FORMAT parquet)",
        f"EXPORT DATABASE '{tmp}/db'",
        f"ATTACH '{tmp}/x.duckdb' AS x",
        "INSTALL httpfs", "LOAD httpfs", "LOAD parquet", "FORCE INSTALL delta",
        "CREATE TABLE t AS SELECT 1 AS a", "CREATE VIEW v AS SELECT 1", "CREATE MACRO m(a) AS a", "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
        "DROP VIEW episodes", "INSERT INTO episodes SELECT * FROM episodes", "DELETE FROM episodes", "UPDATE episodes SET round = 0",
        f"SELECT * FROM read_csv('{secret}')", f"SELECT * FROM read_text('{secret}')", "SELECT * FROM read_text('/etc/passwd')",
        f"SELECT * FROM '{secret}'", f"SELECT * FROM read_parquet('{lake_root}/tables/episodes/*.parquet')",
        f"SELECT * FROM delta_scan('{lake_root}/tables/episodes')", "SELECT * FROM glob('/*')",
        "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')", "SELECT * FROM duckdb_secrets()",
        "SET enable_external_access = true", "RESET enable_external_access", "SET lock_configuration = false",
        "SET threads = 64", "PRAGMA enable_profiling", "PRAGMA memory_limit='1TB'", "CALL pragma_version()",
        "CHECKPOINT", "VACUUM", "USE memory", "DETACH memory", "BEGIN TRANSACTION",
        f"SELECT 1; COPY (SELECT 1) TO '{tmp}/two.csv'",
        f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{tmp}/explain.csv'",
        f"WITH x AS (SELECT * FROM read_csv('{secret}')) SELECT * FROM x",
        "SELECT getenv('FLYWHEEL_S3_SECRET_ACCESS_KEY')",
    ]  # fmt: skip


def test_only_reads_get_through(sql_lake, tmp_path: Path) -> None:
    for q in hostile(tmp_path, sql_lake.uri.root):
        with pytest.raises(LakeError) as e:
            run_query(sql_lake, q)
        assert "\n" not in str(e.value), q
    leaked = [p.name for p in tmp_path.iterdir() if p.name != "secret.csv"]
    assert not leaked, leaked  # nothing was written
    assert sql_lake.count("episodes") == 20  # nothing was changed


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("PRAGMA table_info('episodes')", "PRAGMA statements are refused"),
        ("/* hi */ pragma show_tables", "PRAGMA statements are refused"),
        ("EXPLAIN (FORMAT JSON) SELECT 1", "EXPLAIN with options"),
    ],
)
def test_pragma_and_explain_options_refused_in_one_line(sql_lake, query: str, says: str) -> None:
    with pytest.raises(LakeError) as e:
        run_query(sql_lake, query)
    assert says in str(e.value) and "\n" not in str(e.value) and "Parser Error" not in str(e.value), str(e.value)


def test_shell_refuses_a_pragma_after_a_select() -> None:
    from storage.query import check_read_only

    with pytest.raises(LakeError, match="PRAGMA statements are refused"):
        check_read_only("SELECT 1; PRAGMA version;", single=False)


def test_reads_still_work(sql_lake) -> None:
    for q in ("SELECT count(*) AS n FROM episodes", "FROM episodes SELECT round LIMIT 1", "DESCRIBE episodes",
              "SUMMARIZE rounds", "EXPLAIN SELECT 1", "WITH a AS (SELECT 1 AS x) SELECT * FROM a;",
              "SELECT action_type, count(*) FROM steps GROUP BY ALL", "SELECT column_name FROM lake_columns LIMIT 1",
              "SELECT 'PRAGMA x' AS s", "SELECT 1 AS pragma"):  # fmt: skip
        assert run_query(sql_lake, q).num_rows >= 1, q


def test_cli_sql_and_shell_refuse_writes(sql_lake, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    out = tmp_path / "cli.csv"
    r = subprocess.run([sys.executable, "-m", "flywheel", "sql", f"COPY (SELECT 1) TO '{out}'", "--lake", str(sql_lake.uri)],
                       capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert r.returncode == 1 and r.stderr.startswith("error:") and "read-only" in r.stderr, r.stderr
    script = f"ATTACH '{tmp_path}/a.db' AS a;\nSELECT * FROM read_text('/etc/passwd');\nSET lock_configuration=false;\nSELECT 41 + 1 AS answer;\n"
    r = subprocess.run([sys.executable, "-m", "flywheel", "shell", "--lake", str(sql_lake.uri)], input=script,
                       capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0 and "42" in r.stdout and r.stdout.count("error:") == 3, r.stdout + r.stderr
    assert not out.exists() and not (tmp_path / "a.db").exists()
