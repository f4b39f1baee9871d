"""Audits: reproducible samples, a self-contained sheet, append-only verdicts, and precision intervals that cover
the true precision of simulated rounds (known truth) at the promised rate with the binomial width."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flywheel.people.audit import candidates, draw, expected_width, precision_interval, precision_report, record, sample
from flywheel.people.audit_sheet import write_sheet
from tests.people.helpers import populate


def test_sample_is_reproducible_and_stratified(lake) -> None:
    exp = populate(lake, rounds=(1, 2), per_source=9)
    a = sample(lake, 1, 9, seed=5)
    b = sample(lake, 1, 9, seed=5)
    c = sample(lake, 1, 9, seed=6)
    ids = a.episodes["episode_id"].to_list()
    assert ids == b.episodes["episode_id"].to_list() and len(set(ids)) == 9
    assert ids != c.episodes["episode_id"].to_list()
    assert a.population == exp["n_pass"][1] == 18
    assert set(a.episodes["round"].to_list()) == {1}
    # stratified by source: 6 of 18 per source in the pile -> 3 each of 9
    s = sample(lake, 1, 9, seed=5, stratify=("source",))
    assert s.episodes.group_by("source").len().sort("source")["len"].to_list() == [3, 3, 3]
    assert s.strata == {"interactive": (6, 3), "rollout": (6, 3), "think_aloud": (6, 3)}
    # asking for more than the pile gives the whole pile, once
    assert sample(lake, 1, 500, seed=1).episodes.height == 18
    # a sample drawn at an older pile version ignores later appends
    v = lake.version("sft")
    populate(lake, rounds=(1,), per_source=12)
    assert sample(lake, 1, 9, seed=5, pile_version=v).episodes["episode_id"].to_list() == ids
    with pytest.raises(ValueError, match="cannot stratify"):
        sample(lake, 1, 9, seed=5, stratify=("colour",))
    with pytest.raises(ValueError, match="no episodes of round 7"):
        sample(lake, 7, 9, seed=5)


def test_sheet_is_self_contained(any_lake, tmp_path: Path) -> None:
    populate(any_lake, rounds=(1,), per_source=3)
    s = sample(any_lake, 1, 4, seed=0)
    sheet = write_sheet(any_lake, s, tmp_path / "sheet")
    html = sheet.html.read_text()
    assert sheet.n_episodes == 4 and sheet.missing_screenshots == 0
    assert len(re.findall(r'<img src="data:image/png;base64,', html)) == sheet.n_screenshots == 8
    assert not re.search(r'(src|href)="(https?:|//|/)', html)  # nothing to fetch
    assert "<b>bold?</b>" not in html and "&lt;b&gt;bold?&lt;/b&gt;" in html  # thoughts are escaped
    assert html.count('class="mark"') == 4  # the click of each episode's first step is marked
    for eid in s.episodes["episode_id"]:
        assert eid in html
    rows = list(csv.DictReader(sheet.csv.open()))
    assert [r["episode_id"] for r in rows] == s.episodes["episode_id"].to_list()
    assert all(r["verdict"] == "" and r["seed"] == "0" and r["round"] == "1" for r in rows)
    meta = json.loads(sheet.meta.read_text())
    assert meta["sft_version"] == any_lake.version("sft") and meta["n_drawn"] == 4


def _fill(path: Path, verdicts: dict[str, str], auditor: str = "") -> None:
    rows = list(csv.DictReader(path.open()))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({**r, "verdict": verdicts.get(r["episode_id"], ""), "auditor": auditor, "note": "checked"})


def test_record_is_append_only_and_idempotent(lake, tmp_path: Path) -> None:
    populate(lake, rounds=(2,), per_source=3, audits=False)
    s = sample(lake, 2, 5, seed=3)
    sheet = write_sheet(lake, s, tmp_path)
    ids = s.episodes["episode_id"].to_list()
    _fill(sheet.csv, {ids[0]: "good", ids[1]: "bad", ids[2]: "GOOD"})
    before = {t: lake.version(t) for t in ("sft", "ct", "episodes", "verdicts")}
    res = record(lake, sheet.csv, auditor="alice")
    assert (res.added, res.already, res.blank, res.errors) == (3, 0, 2, ())
    assert record(lake, sheet.csv, auditor="alice").added == 0  # same sheet again: nothing new
    assert {t: lake.version(t) for t in before} == before  # auditing never writes the piles
    # alice changes her mind on ids[1]: a new row; the audited view takes her latest verdict
    _fill(sheet.csv, {ids[1]: "good"})
    assert record(lake, sheet.csv, auditor="alice").added == 1
    assert lake.count("audits") == 4
    good = dict(lake.duckdb().sql("SELECT episode_id, good FROM audited").fetchall())
    assert good == {ids[0]: True, ids[1]: True, ids[2]: True}
    # a second auditor saying bad makes the episode bad
    _fill(sheet.csv, {ids[0]: "bad"}, auditor="bob")
    record(lake, sheet.csv)
    good = dict(lake.duckdb().sql("SELECT episode_id, good FROM audited").fetchall())
    assert good[ids[0]] is False


def test_record_reports_bad_rows_and_keeps_the_good(lake, tmp_path: Path) -> None:
    populate(lake, rounds=(1,), per_source=3)
    eid = lake.read("sft", ["episode_id"]).column(0)[0].as_py()
    f = tmp_path / "v.csv"
    f.write_text(
        "episode_id,round,seed,verdict,auditor\n"
        f"{eid},1,0,good,carol\n"
        f"{eid},1,0,maybe,carol\n"
        "nope,1,0,good,carol\n"
        f"{eid},5,0,bad,carol\n"
        f"{eid},1,0,bad,\n"
    )
    res = record(lake, f)
    assert res.added == 1
    assert [e.split(":")[0] for e in res.errors] == ["line 3", "line 6", "line 4", "line 5"]
    assert "not good or bad" in res.errors[0] and "no auditor" in res.errors[1]
    assert "not in the SFT pile" in res.errors[2] and "round 5" in res.errors[3]
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an audit sheet"):
        record(lake, bad)


def test_report_intervals_and_flags() -> None:
    frame = pl.DataFrame(
        {"round": [1] * 50 + [2] * 50, "source": ["rollout"] * 100, "validators": ["a@1"] * 100,
         "good": [True] * 48 + [False] * 2 + [True] * 35 + [False] * 15}
    )  # fmt: skip
    rep = precision_report(frame, levels=[("round",), ("round", "source")], threshold=0.9)
    r1, r2 = rep.filter(pl.col("level") == "round").sort("round").iter_rows(named=True)
    assert (r1["n_audited"], r1["n_good"], r1["status"]) == (50, 48, "ok")
    assert (r2["n_good"], r2["status"]) == (35, "below")  # 0.70 [0.56, 0.81] is wholly under 0.9
    from statsmodels.stats.proportion import proportion_confint

    assert (r2["lo"], r2["hi"]) == pytest.approx(proportion_confint(35, 50, method="wilson"))
    cp = precision_report(frame, levels=[("round",)], method="clopper-pearson").sort("round").row(1, named=True)
    assert (cp["lo"], cp["hi"]) == pytest.approx(proportion_confint(35, 50, method="beta"))
    assert rep.filter(pl.col("level") == "round,source").height == 2
    with pytest.raises(ValueError):
        precision_interval(1, 2, "wald")


# ------------------------------------------------------------------------------------- acceptance: statistics
@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory):
    """Two routed rounds of synthetic rollouts with known truth; a lenient verifier lets true failures into SFT."""
    from storage import Lake
    from validators.registry import parse_policy
    from validators.routing import route_round
    from validators.synthetic import screenshot_pool, synthetic_rollouts

    lake = Lake.open(tmp_path_factory.mktemp("sim") / "lake", create=True)
    pool = screenshot_pool(lake)
    # the environment's (lenient) verdict decides, behind the structural checks: the audit must find its errors
    policy = parse_policy(
        {"sources": {"rollout": ["schema", "action_grammar", "on_screen", "env_verdict"], "default": ["schema"]}}
    )
    for r, leniency in ((1, 0.35), (2, 0.1)):
        lake.append(
            "episodes",
            synthetic_rollouts(1200, r, screenshots=pool, steps=3, seed=r, true_pass_share=0.6, leniency=leniency),
        )
        route_round(lake, r, policy=policy)
    from storage.piles import read_pile

    truth = pl.from_arrow(read_pile(lake, "sft", ["episode_id", "meta"])).select(
        "episode_id", pl.col("meta").str.json_path_match("$.truth").eq("true").alias("truth")
    )
    return lake, truth


def test_precision_interval_covers_the_true_precision(simulated) -> None:
    """Acceptance: over 200 seeded samples of n=200 per round, the 95% interval covers the round's true SFT
    precision at least 95% of the time, and its width matches 2 z sqrt(p(1-p)/n)."""
    lake, truth = simulated
    n, seeds = 200, range(200)
    for r in (1, 2):
        c = candidates(lake, r)
        true_p = c.frame.join(truth, on="episode_id")["truth"].mean()
        assert 0.6 < true_p < 0.99  # the lenient verifier really let failures through
        covered, widths = 0, []
        for seed in seeds:
            s = draw(c, n, seed)
            audited = s.episodes.join(truth, on="episode_id").rename({"truth": "good"})
            row = precision_report(audited, levels=[("round",)]).row(0, named=True)
            assert row["n_audited"] == n
            covered += row["lo"] <= true_p <= row["hi"]
            widths.append(row["hi"] - row["lo"])
        coverage = covered / len(seeds)
        ratio = float(np.mean(widths)) / expected_width(true_p, n)
        print(f"round {r}: true precision {true_p:.3f}, coverage {coverage:.3f}, width ratio {ratio:.3f}")
        assert coverage >= 0.95
        assert 0.93 < ratio < 1.05


def test_audit_cli_end_to_end_on_simulated_round(simulated, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sample -> fill the CSV with the truth -> record -> report, through the CLI, agrees with direct computation."""
    from typer.testing import CliRunner

    from flywheel.cli import app

    lake, truth = simulated
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    out = tmp_path / "audit"
    r = runner.invoke(
        app,
        [
            "audit",
            "sample",
            "--round",
            "1",
            "--n",
            "40",
            "--seed",
            "11",
            "--stratify",
            "task_family",
            "--out",
            str(out),
            "--lake",
            str(lake.uri),
        ],
    )
    assert r.exit_code == 0, r.output
    t = dict(zip(truth["episode_id"].to_list(), truth["truth"].to_list()))
    rows = list(csv.DictReader((out / "verdicts.csv").open()))
    _fill(
        out / "verdicts.csv", {x["episode_id"]: "good" if t[x["episode_id"]] else "bad" for x in rows}, auditor="oracle"
    )
    r = runner.invoke(app, ["audit", "record", str(out / "verdicts.csv"), "--lake", str(lake.uri)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app, ["audit", "report", "--round", "1", "--format", "json", "--lake", str(lake.uri), "--by", "source"]
    )
    assert r.exit_code == 0, r.output
    rep = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    top = next(x for x in rep if x["level"] == "round")
    k = sum(t[x["episode_id"]] for x in rows)
    assert (top["n_audited"], top["n_good"]) == (40, k)
    assert (top["lo"], top["hi"]) == pytest.approx(precision_interval(k, 40)[1:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit"]  # nothing else written in the cwd
