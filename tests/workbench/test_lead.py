"""The lead's view over real sessions, uploads and audits: tasks, statuses, acceptance rates, Cohen's kappa."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.workbench.conftest import client
from tests.workbench.lakes import routed_round
from tests.workbench.test_access import _bundle


def test_kappa_matches_the_textbook_value() -> None:
    from flywheel.workbench.lead import kappa

    # 20 episodes: both good 8, both bad 9, 1 and 2 disagreements: po = 0.85, pe = 0.5, kappa = 0.7
    pairs = [("good", "good")] * 8 + [("good", "bad")] + [("bad", "good")] * 2 + [("bad", "bad")] * 9
    assert abs(kappa(pairs) - 0.7) < 1e-9
    assert kappa([("good", "good")] * 5) is None  # one category: undefined
    assert kappa([]) is None


def test_lead_page_shows_tasks_sessions_rates_and_agreement(bench, tmp_path: Path) -> None:
    from flywheel.people.audit import record_rows

    lead, alice = client(bench, "lena"), client(bench, "alice")
    tasks = lead.post("/api/assign", json={"annotator": "alice", "n": 3, "seed": 2}).json()
    lead.post("/api/assign", json={"annotator": "bob", "n": 2, "seed": 4, "mode": "think-aloud"})
    # alice annotates one task: accepts the first proposal, then overrides until the episode ends
    sid = alice.post("/api/live", json={"assignment_id": tasks[0]["assignment_id"]}).json()["session_id"]
    st = alice.post(f"/api/live/{sid}/act", json={"accept": 0}).json()
    decisions = ["accepted"]
    while not st["done"] and len(decisions) < 4:
        st = alice.post(f"/api/live/{sid}/act", json={"input": {"kind": "wait"}, "thought": "let it load"}).json()
        decisions.append("overridden")
    if not st["done"]:
        st = alice.post(f"/api/live/{sid}/act", json={"input": {"kind": "finished", "text": "done"}, "thought": "I am done"}).json()  # fmt: skip
        decisions.append("overridden")
    landed = alice.post(f"/api/live/{sid}/finish")
    assert landed.status_code == 200, landed.text
    # bob uploads a bundle that is not ingested yet
    assert client(bench, "bob").post("/api/upload?name=b.zip", content=_bundle(tmp_path, "bob").read_bytes()).status_code == 200  # fmt: skip
    # two auditors judge the same 20 episodes: 8 both good, 9 both bad, 3 disagree (kappa 0.7)
    assert routed_round(bench.lake) >= 20
    ids = bench.lake.read("sft", ["episode_id"]).column("episode_id").to_pylist()[:20]
    a = ["good"] * 8 + ["good"] + ["bad"] * 2 + ["bad"] * 9
    b = ["good"] * 8 + ["bad"] + ["good"] * 2 + ["bad"] * 9
    now = datetime.now(UTC)
    for who, vs in (("otto", a), ("ivy", b)):
        rows = [{"episode_id": e, "seed": 0, "csv_round": None, "auditor": who, "verdict": v, "note": None, "line": i}
                for i, (e, v) in enumerate(zip(ids, vs))]  # fmt: skip
        assert record_rows(bench.lake, rows, now)[0] == 20

    r = lead.get("/lead")
    assert r.status_code == 200
    html = r.text
    from flywheel.workbench.lead import lead_view

    view = lead_view(bench.lake, bench.app.state.landing, bench.app.state.store)
    rate = next(x for x in view["rates"] if x["user"] == "alice")
    n = len(decisions)
    assert rate["steps"] == n and abs(rate["acceptance"] - 1 / n) < 1e-9 and abs(rate["override"] - (n - 1) / n) < 1e-9
    assert rate["s_per_step"] is not None and rate["s_per_step"] >= 0
    status = {s["user"]: s["status"] for s in view["sessions"]}
    assert status == {"alice": "landed", "bob": "uploaded"}
    overall = next(g for g in view["agreement"] if g.annotator is None)
    assert overall.auditors == ("ivy", "otto") and overall.n == 20 and abs(overall.kappa - 0.7) < 1e-9
    assert "0.70" in html and f"{round(100 / n)}%" in html and "not ingested yet" in html
    counts = view["tasks"]
    assert counts["alice"]["annotate done"] == 1 and counts["alice"]["annotate assigned"] == 2
    assert counts["bob"]["think-aloud assigned"] == 2
    # only leads (and admins) see it
    assert alice.get("/lead").status_code == 403
    assert client(bench, "otto").get("/lead").status_code == 403
    assert client(bench, "ada").get("/lead").status_code == 200
