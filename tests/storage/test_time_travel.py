"""Time travel: read a table, or query the lake, as it was at a given Delta version."""

from __future__ import annotations

import csv
import io

import pytest
from typer.testing import CliRunner

from flywheel.cli import app
from storage import LakeError
from storage.query import run_query
from tests.storage.data import episodes, ids


def test_read_and_sql_as_of_version(any_lake) -> None:
    v0 = any_lake.version("episodes")
    any_lake.append("episodes", episodes(4))
    v1 = any_lake.version("episodes")
    any_lake.append("episodes", episodes(6, start=4))
    assert any_lake.version("episodes") == v1 + 1

    assert any_lake.count("episodes", version=v0) == 0
    assert ids(any_lake.read("episodes", version=v1)) == ids(episodes(4))
    assert any_lake.count("episodes") == 10

    q = "SELECT count(*) AS n FROM episodes"
    assert run_query(any_lake, q, version=v1).to_pylist() == [{"n": 4}]
    assert run_query(any_lake, q, version={"episodes": v1 + 1}).to_pylist() == [{"n": 10}]
    # a bare N pins only the tables the query reads (sessions has fewer versions than episodes)
    q2 = "SELECT (SELECT count(*) FROM episodes) AS e, (SELECT count(*) FROM sessions) AS s"
    assert run_query(any_lake, q2, version={"episodes": v1}).to_pylist() == [{"e": 4, "s": 0}]

    with pytest.raises(LakeError, match=r"versions 0\.\.\d+; version 99 does not exist"):
        any_lake.read("episodes", version=99)

    runner = CliRunner()
    for pin in (str(v1), f"episodes={v1}"):
        r = runner.invoke(app, ["sql", q, "--lake", str(any_lake.uri), "--as-of-version", pin, "--format", "csv"])
        assert r.exit_code == 0, r.output
        assert list(csv.reader(io.StringIO(r.stdout))) == [["n"], ["4"]]
    r = runner.invoke(app, ["sql", q, "--lake", str(any_lake.uri), "--format", "csv"])
    assert list(csv.reader(io.StringIO(r.stdout))) == [["n"], ["10"]]
