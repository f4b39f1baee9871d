"""The numbers on the page agree with the lake, computed independently with PyArrow / Polars."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from statsmodels.stats.proportion import proportion_confint

from dashboards.data import run_panel
from dashboards.render import build_page
from dashboards.spec import load_panels


def _panel(lake, pid: str):
    spec = next(s for s in load_panels() if s.id == pid)
    con = lake.duckdb()
    try:
        data = run_panel(con, spec)
    finally:
        con.close()
    assert data.error is None, data.error
    return data


def _pl(lake, table: str) -> pl.DataFrame:
    return pl.from_arrow(lake.read(table, columns=[c for c in lake.read(table).column_names if c != "steps"]))


def test_all_panels_ok_and_kpis_match(demo_lake) -> None:
    lake, totals = demo_lake
    page = build_page(lake)
    assert {p.state for p in page.panels} == {"ok"}, [(p.id, p.state, p.message) for p in page.panels]
    html = page.html
    for label, value in (
        ("SFT pile", totals.sft),
        ("CT pile", totals.ct),
        ("episodes", totals.episodes),
        ("quarantined inputs", totals.quarantined),
    ):
        assert f'<div class="v">{value:,}</div><div class="l">{label}</div>' in html


def test_pass_rate_matches_rounds_table(demo_lake) -> None:
    lake, _ = demo_lake
    rows = _panel(lake, "pass_rate").rows
    rounds = {r["round"]: r for r in lake.read("rounds").to_pylist()}
    new = [r for r in rows if r["series"].startswith("new samples")]
    ev = [r for r in rows if r["series"] == "held-out eval"]
    assert [r["round"] for r in new] == sorted(rounds) == [r["round"] for r in ev]
    for r in new:
        assert r["rate"] == pytest.approx(rounds[r["round"]]["pass_rate"])
        assert r["lo"] == pytest.approx(rounds[r["round"]]["pass_rate_lo"])
    for r in ev:
        assert r["hi"] == pytest.approx(rounds[r["round"]]["eval_pass_rate_hi"])


def test_pass_rate_by_level_counts_the_piles(demo_lake) -> None:
    lake, _ = demo_lake
    rows = _panel(lake, "pass_rate_by_level").rows
    sft = _pl(lake, "sft").with_columns(passed=pl.lit(1))
    ct = _pl(lake, "ct").with_columns(passed=pl.lit(0))
    both = pl.concat([sft.select("round", "difficulty", "passed"), ct.select("round", "difficulty", "passed")])
    truth = both.group_by("round", "difficulty").agg(k=pl.col("passed").sum(), n=pl.len())
    expect = {(r["round"], f"level {r['difficulty']}"): (r["k"], r["n"]) for r in truth.to_dicts()}
    assert len(rows) == len(expect)
    for r in rows:
        k, n = expect[(r["round"], r["level"])]
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert (r["k"], r["n"]) == (k, n)
        assert r["rate"] == pytest.approx(k / n) and r["lo"] == pytest.approx(lo) and r["hi"] == pytest.approx(hi)


def test_sources_reasons_quarantine_and_training(demo_lake) -> None:
    lake, totals = demo_lake
    by_source = _panel(lake, "new_episodes_by_source").rows
    ep = _pl(lake, "episodes").group_by("round", "source").len()
    assert {(r["round"], r["source"]): r["episodes"] for r in by_source} == {
        (r["round"], r["source"]): r["len"] for r in ep.to_dicts()
    }

    reasons = _panel(lake, "validator_reasons").rows
    failing = _pl(lake, "verdicts").filter(~pl.col("passed"))
    assert sum(r["failures"] for r in reasons) == failing.height
    assert len({r["reason"] for r in reasons}) <= 9  # top 8 + other

    q = _panel(lake, "quarantine").rows
    assert sum(r["inputs"] for r in q) == totals.quarantined

    loss = _panel(lake, "training_loss")
    runs = lake.read("training_runs").to_pylist()
    last = max(runs, key=lambda r: (r["round"], r["stage"] == "sft"))
    pts = [r["loss"] for r in loss.rows if r["stage"] == last["stage"].upper() and r["run"] == f"round {last['round']}"]
    assert pts == pytest.approx(last["losses"])  # short curves are shown whole
    assert len(loss.table_rows) == totals.training_runs


def test_rl_curves_show_every_update_of_the_latest_rl_jobs(demo_lake) -> None:
    lake, _ = demo_lake
    runs = [r for r in lake.read("training_runs").to_pylist() if r["stage"] == "rl"]
    last = max(runs, key=lambda r: r["round"])
    its = json.loads(last["metrics"])["iterations"]
    rows = _panel(lake, "rl_curves").rows
    mine = [r for r in rows if r["run"] == f"round {last['round']}"]
    assert [r["value"] for r in mine if r["metric"] == "reward"] == pytest.approx([i["reward_mean"] for i in its])
    assert [r["value"] for r in mine if r["metric"] == "entropy"] == pytest.approx([i["entropy"] for i in its])
    assert [r["iteration"] for r in mine if r["metric"] == "entropy"] == list(range(1, len(its) + 1))
    assert len({r["run"] for r in rows}) == min(6, len(runs))
    stab = {r["metric"] for r in rows}
    assert {"clipped, low side", "clipped, high side", "KL to behaviour", "all-equal groups", "episode age"} <= stab


def test_merge_sweep_shows_each_world_along_alpha_beside_the_base(demo_lake) -> None:
    lake, _ = demo_lake
    run = next(r for r in lake.read("training_runs").to_pylist() if r["stage"] == "merge")
    sweep = json.loads(run["metrics"])["sweep"]
    rows = _panel(lake, "merge_sweep").rows
    for world in ("forms", "menus"):
        merged = [r for r in rows if r["world"] == world and r["line"] == "merge"]
        assert [r["alpha"] for r in merged] == [p["alpha"] for p in sweep["points"]]
        assert [r["rate"] for r in merged] == pytest.approx([p["rates"][world]["rate"] for p in sweep["points"]])
        base = [r for r in rows if r["world"] == world and r["line"] == "base"]
        assert {r["rate"] for r in base} == {sweep["base"][world]["rate"]} and len(base) == len(merged)


def test_specialists_panel_shows_the_mixed_heldout_and_each_rounds_rl_mode(demo_lake) -> None:
    from validators.rounds import read_rounds

    lake, _ = demo_lake
    recs = read_rounds(lake)
    last = recs[-1]
    rows = _panel(lake, "specialists").rows
    assert {(r["round"], r["part"]): (r["k"], r["n"]) for r in rows} == {
        (last.round, k): (v["k"], v["n"]) for k, v in last.mixed["rates"].items()
    }
    assert [r["part"] for r in rows][-1] == "overall"
    data = _panel(lake, "specialists")
    table = {(r["round"], r["specialist"]): r for r in data.table_rows}
    for rec in recs:
        if rec.rl.mode == "joint":
            assert table[(rec.round, None)]["mode"] == "joint"
            assert table[(rec.round, None)]["checkpoint"] == rec.rl.checkpoint
    for s in last.rl.specialists:
        row = table[(last.round, s.name)]
        assert row["mode"] == "specialists" and row["world"] == s.subset() and row["alpha"] == last.rl.alphas[s.name]
        assert row["checkpoint"] == s.checkpoint
    assert table[(last.round, "merged")]["checkpoint"] == last.rl.checkpoint


def test_round_stages_read_stage_status(demo_lake) -> None:
    lake, _ = demo_lake
    rows = _panel(lake, "round_stages").rows
    truth = {
        (r["round"], st): v["seconds"]
        for r in lake.read("rounds").to_pylist()
        for st, v in json.loads(r["stage_status"]).items()
    }
    assert {(r["round"], r["stage"]): r["seconds"] for r in rows} == truth
    assert [r["stage"] for r in rows][0] == "ingest"  # stages keep the order the round recorded


def test_audit_precision_uses_latest_verdict(demo_lake) -> None:
    lake, _ = demo_lake
    before = {r["round"]: r for r in _panel(lake, "audit_precision").rows}
    one = lake.read("audits").to_pylist()[0]
    flipped = "bad" if one["verdict"] == "good" else "good"
    lake.append(
        "audits",
        [{**one, "audit_id": "re-audit", "verdict": flipped, "recorded_at": one["recorded_at"].replace(year=2030)}],
    )
    after = {r["round"]: r for r in _panel(lake, "audit_precision").rows}
    r = one["round"]
    assert after[r]["n"] == before[r]["n"]
    assert after[r]["k"] == before[r]["k"] + (1 if flipped == "good" else -1)
    lo, hi = proportion_confint(after[r]["k"], after[r]["n"], method="wilson")
    assert (after[r]["lo"], after[r]["hi"]) == pytest.approx((lo, hi))


def test_breakdown_shapes_and_bad_json(lake) -> None:
    """eval_by_level reads {"n","n_pass"} objects, bare rates, both key spellings, and skips broken JSON."""
    now = pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py()
    lake.upsert(
        "rounds",
        [
            {
                "round": 1,
                "breakdown": json.dumps({"eval": {"by_level": {"1": {"n": 50, "n_pass": 20}, "2": 0.25}}}),
                "updated_at": now,
            },
            {"round": 2, "breakdown": "{not json", "updated_at": now},
            {"round": 3, "breakdown": json.dumps({"by_source": {"rollout": {"n": 3}}}), "updated_at": now},
            {
                "round": 4,
                "breakdown": json.dumps(
                    {"eval": {"level": {"3": {"n": 10, "n_pass": 5, "pass_rate": 0.5, "lo": None, "hi": None}}}}
                ),
                "updated_at": now,
            },
        ],
    )
    rows = _panel(lake, "eval_by_level").rows
    assert [(r["round"], r["level"]) for r in rows] == [(1, "level 1"), (1, "level 2"), (4, "level 3")]
    l1, l2, l3 = rows
    assert l3["rate"] == 0.5 and l3["hi"] == pytest.approx(proportion_confint(5, 10, method="wilson")[1])
    assert l1["rate"] == pytest.approx(0.4) and l1["lo"] == pytest.approx(
        proportion_confint(20, 50, method="wilson")[0]
    )
    assert l2["rate"] == pytest.approx(0.25) and l2["lo"] is None  # a bare rate has no interval
    page = build_page(lake)
    states = {p.id: p.state for p in page.panels}
    assert states["eval_by_level"] == "ok" and "error" not in states.values()


def test_interval_fill_keeps_stored_values() -> None:
    from dashboards.data import wilson_fill
    from dashboards.spec import PanelSpec, Wilson

    spec = PanelSpec(
        title="t",
        chart="line",
        x="x",
        y="rate",
        lo="lo",
        hi="hi",
        empty="e",
        wilson=Wilson(k="k", n="n", rate="rate", lo="lo", hi="hi"),
    )
    t = pa.table(
        {
            "x": [1, 2, 3],
            "k": [3, 0, None],
            "n": [10, 0, 5],
            "rate": [None, None, 0.5],
            "lo": [0.01, None, None],
            "hi": [None, None, None],
        }
    )
    out = wilson_fill(t, spec).to_pylist()
    lo, hi = proportion_confint(3, 10, method="wilson")
    assert out[0]["rate"] == pytest.approx(0.3) and out[0]["lo"] == 0.01 and out[0]["hi"] == pytest.approx(hi)
    assert out[1]["rate"] is None and out[1]["lo"] is None  # n = 0: no rate, no interval
    assert out[2]["rate"] == 0.5 and out[2]["lo"] is None
    assert not math.isnan(lo)


def test_panel_queries_must_aggregate(demo_lake) -> None:
    from dashboards.spec import PanelSpec

    lake, _ = demo_lake
    raw = PanelSpec(
        id="raw", title="raw", chart="bar", x="round", y="n_steps", empty="e", sql="SELECT round, n_steps FROM episodes"
    )
    con = lake.duckdb()
    data = run_panel(con, raw, max_rows=100)
    con.close()
    assert data.error and "must aggregate" in data.error


def test_broken_panel_does_not_break_the_page(demo_lake, tmp_path) -> None:
    import shutil

    from dashboards.spec import PANELS_DIR

    lake, _ = demo_lake
    folder = tmp_path / "panels"
    shutil.copytree(PANELS_DIR, folder)
    (folder / "pile_growth.sql").write_text("SELECT round, no_such_column FROM rounds")
    page = build_page(lake, load_panels(folder))
    states = {p.id: p for p in page.panels}
    assert states["pile_growth"].state == "error" and "no_such_column" in states["pile_growth"].message
    assert all(p.state == "ok" for k, p in states.items() if k != "pile_growth")
    assert "This panel&#39;s query failed" in page.html or "This panel's query failed" in page.html


def test_bad_spec_names_the_file(tmp_path) -> None:
    (tmp_path / "oops.sql").write_text("SELECT 1 AS x, 2 AS y")
    (tmp_path / "oops.yaml").write_text("title: t\nchart: pie\nx: x\ny: y\nempty: e\n")
    with pytest.raises(ValueError, match="oops.yaml"):
        load_panels(tmp_path)
    (tmp_path / "oops.yaml").write_text("title: t\nchart: line\nx: x\ny: y\n")  # no empty-state text
    with pytest.raises(ValueError, match="empty"):
        load_panels(tmp_path)


def test_every_shipped_panel_has_sql_title_and_empty_text() -> None:
    panels = load_panels()
    assert len(panels) >= 13
    for p in panels:
        assert p.sql.strip() and p.title and "`" in p.empty, p.id
    ids = [p.id for p in panels]
    for required in (
        "pass_rate",
        "pass_rate_by_level",
        "eval_by_level",
        "pile_growth",
        "new_episodes_by_source",
        "validator_reasons",
        "gx_results",
        "audit_precision",
        "thinkaloud_quality",
        "override_rate",
        "training_loss",
        "training_tokens",
        "training_wall_time",
        "rl_curves",
        "merge_sweep",
        "specialists",
        "round_stages",
        "quarantine",
    ):
        assert required in ids
    assert np.all(np.diff([p.order for p in panels]) >= 0)
