"""The lead's view: who has which tasks, what became of each session, and how each annotator's work measures up.

Everything is read with filters: the sessions of the workbench's annotators (by their pseudonyms, the only ids
the lake holds), the upload records of the landing area, quarantine rows of those uploads, the audits table and,
for the audited episodes only, their annotator. Rates per annotator: acceptance = accepted proposals / steps of
their interactive sessions (override rate = 1 - acceptance), time per step = session seconds / actions; audit
agreement is Cohen's kappa (statsmodels) between two auditors on the episodes both judged (each auditor's latest
verdict), overall and per annotator; None where no two auditors overlap or the kappa is undefined.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flywheel.people.upload import Landing
from flywheel.workbench.store import Store
from storage.lake import Lake

SESSION_COLUMNS = ["session_id", "source", "annotator", "group", "status", "landed_uri", "content_sha256", "round",
                   "n_actions", "duration_s", "thought_share", "override_rate", "problems", "ingested_at"]  # fmt: skip


@dataclass(frozen=True)
class Agreement:
    auditors: tuple[str, str]
    annotator: str | None  # None: over every episode both judged
    n: int
    agree: float
    kappa: float | None


def kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of paired good/bad verdicts; None when undefined (one category only, or no pairs)."""
    import numpy as np
    from statsmodels.stats.inter_rater import cohens_kappa

    if not pairs:
        return None
    idx = {"good": 0, "bad": 1}
    table = np.zeros((2, 2))
    for a, b in pairs:
        table[idx[a], idx[b]] += 1
    with np.errstate(divide="ignore", invalid="ignore"):  # one category only: 0/0, reported as undefined
        k = float(cohens_kappa(table).kappa)
    return None if math.isnan(k) else k


def agreement(lake: Lake, annotator_of: dict[str, str] | None = None) -> list[Agreement]:
    """Kappa per pair of auditors (latest verdict per episode and auditor), overall and per annotator."""
    rows = lake.read("audits", ["episode_id", "auditor", "verdict", "recorded_at"]).to_pylist()
    latest: dict[tuple[str, str], dict] = {}
    for r in rows:
        k = (r["episode_id"], r["auditor"])
        if k not in latest or r["recorded_at"] > latest[k]["recorded_at"]:
            latest[k] = r
    by_auditor: dict[str, dict[str, str]] = defaultdict(dict)
    for (eid, who), r in latest.items():
        by_auditor[who][eid] = r["verdict"]
    out = []
    for a, b in itertools.combinations(sorted(by_auditor), 2):
        both = sorted(set(by_auditor[a]) & set(by_auditor[b]))
        if not both:
            continue
        groups: dict[str | None, list[str]] = {None: both}
        for eid in both:
            if annotator_of and annotator_of.get(eid):
                groups.setdefault(annotator_of[eid], []).append(eid)
        for who, eids in groups.items():
            pairs = [(by_auditor[a][e], by_auditor[b][e]) for e in eids]
            agree = sum(x == y for x, y in pairs) / len(pairs)
            out.append(Agreement((a, b), who, len(pairs), agree, kappa(pairs)))
    return out


def audited_annotators(lake: Lake) -> dict[str, str]:
    """episode_id -> annotator pseudonym for the audited episodes only (read by round and id)."""
    a = lake.read("audits", ["episode_id", "round"])
    if a.num_rows == 0:
        return {}
    ids = pa.array(sorted(set(a.column("episode_id").to_pylist())), pa.string())
    rounds = pa.array(sorted(set(a.column("round").to_pylist())), pa.int32())
    t = lake.read("episodes", ["episode_id", "annotator"],
                  filter=pc.field("round").isin(rounds) & pc.field("episode_id").isin(ids))  # fmt: skip
    return {r["episode_id"]: r["annotator"] for r in t.to_pylist() if r["annotator"]}


def lead_view(lake: Lake, landing: Landing, store: Store) -> dict[str, Any]:
    """What the lead page shows (see the module docstring)."""
    from ingest.pii import pseudonym

    annotators = [u for u in store.users() if u.role == "annotator"]
    name_of = {pseudonym(u.username): u.username for u in annotators}
    tasks: dict[str, Counter] = {u.username: Counter() for u in annotators}
    for a in store.assignments():
        tasks.setdefault(a.annotator, Counter())[f"{a.mode} {a.status}"] += 1
    sessions = []
    if name_of:
        flt = pc.field("annotator").isin(pa.array(list(name_of), pa.string()))
        sessions = lake.read("sessions", SESSION_COLUMNS, filter=flt).to_pylist()
    for s in sessions:
        s["user"] = name_of.get(s["annotator"])
        s["reason"] = "; ".join(s["problems"] or [])
    seen_uri = {s["landed_uri"] for s in sessions}
    seen_sha = {s["content_sha256"] for s in sessions}
    pending = [r for r in landing.records() if r.get("annotator") in name_of
               and r["landed_uri"] not in seen_uri and r.get("content_sha256") not in seen_sha]  # fmt: skip
    reasons: dict[str, str] = {}
    if pending:
        q = lake.read("quarantine", ["landed_uri", "error_type", "error"],
                      filter=pc.field("landed_uri").isin(pa.array([r["landed_uri"] for r in pending], pa.string())))  # fmt: skip
        for r in q.to_pylist():
            reasons.setdefault(r["landed_uri"], f"{r['error_type']}: {r['error']}")
    for r in pending:
        why = reasons.get(r["landed_uri"])
        sessions.append({**dict.fromkeys(SESSION_COLUMNS), "session_id": r["session_id"], "source": "think_aloud", "user": name_of[r["annotator"]],
                         "group": r.get("group"), "status": "quarantined" if why else "uploaded",
                         "reason": why or "not ingested yet", "n_actions": r.get("n_actions"),
                         "duration_s": r.get("duration_s"), "landed_uri": r["landed_uri"]})  # fmt: skip
    rates = []
    for u in annotators:
        mine = [s for s in sessions if s["user"] == u.username and s.get("status") == "landed"]
        inter = [s for s in mine if s["source"] == "interactive" and s.get("n_actions")]
        steps = sum(s["n_actions"] for s in inter)
        overridden = sum((s["override_rate"] or 0.0) * s["n_actions"] for s in inter)
        timed = [s for s in mine if s.get("n_actions") and s.get("duration_s") is not None]
        n_timed = sum(s["n_actions"] for s in timed)
        rates.append({"user": u.username, "group": u.group, "pseudonym": pseudonym(u.username),
                      "sessions": len(mine), "steps": steps,
                      "acceptance": (steps - overridden) / steps if steps else None,
                      "override": overridden / steps if steps else None,
                      "s_per_step": sum(s["duration_s"] for s in timed) / n_timed if n_timed else None})  # fmt: skip
    agree = [replace(g, annotator=name_of.get(g.annotator, g.annotator)) if g.annotator else g  # names for the lead
             for g in agreement(lake, audited_annotators(lake))]  # fmt: skip
    return {"annotators": annotators, "tasks": tasks, "sessions": sessions, "rates": rates, "agreement": agree}
