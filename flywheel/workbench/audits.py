"""Audits in the browser: a reproducible sample of the SFT pile, stepped through one episode at a time.

The sample is `flywheel.people.audit.sample` (the same draw as `flywheel audit sample`), kept as a small JSON
document in `<landing>/.workbench/audits/<sample_id>.json` (round, seed, pile version, episode ids). A page reads
one episode of it by id from the pinned pile version, its validators' verdicts by episode id, and the auditor's
own earlier verdicts; a verdict goes through `flywheel.people.audit.record_rows`, the writer of the CSV path, so it
shows in `flywheel audit report` and on the dashboard.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flywheel.people.audit import VERDICTS, record_rows, sample
from flywheel.people.audit_sheet import episode_steps
from storage.lake import Lake
from storage.objects import ObjectStore
from storage.piles import read_pile

SAMPLES = ".workbench/audits"


@dataclass(frozen=True)
class Sample:
    sample_id: str
    round: int
    seed: int
    n: int
    pile_version: int
    population: int
    episode_ids: tuple[str, ...]
    created_by: str


def draw_sample(lake: Lake, store: ObjectStore, round: int, n: int, seed: int, by: str) -> Sample:
    """Draw (or find again: the same round, seed, n and pile version give the same sample) and keep a sample."""
    s = sample(lake, round, n, seed)
    sid = f"r{round}-s{seed}-n{n}-v{s.pile_version}"
    out = Sample(sid, round, seed, n, s.pile_version, s.population,
                 tuple(s.episodes.get_column("episode_id").to_list()), by)  # fmt: skip
    if not store.exists(f"{SAMPLES}/{sid}.json"):
        store.put_text(f"{SAMPLES}/{sid}.json", json.dumps(asdict(out), indent=2))
    return out


def samples(store: ObjectStore) -> list[Sample]:
    out = []
    for key in store.list(SAMPLES):
        raw = store.get_text(key)
        if raw:
            d = json.loads(raw)
            out.append(Sample(**{**d, "episode_ids": tuple(d["episode_ids"])}))
    return sorted(out, key=lambda s: s.sample_id)


def get_sample(store: ObjectStore, sample_id: str) -> Sample | None:
    if "/" in sample_id or "\\" in sample_id or sample_id.startswith("."):
        return None
    raw = store.get_text(f"{SAMPLES}/{sample_id}.json")
    if not raw:
        return None
    d = json.loads(raw)
    return Sample(**{**d, "episode_ids": tuple(d["episode_ids"])})


def episode_view(lake: Lake, s: Sample, i: int, auditor: str) -> dict[str, Any]:
    """Episode i of the sample as the audit page shows it: steps with screenshots and marks, the validators'
    verdicts and reasons, and this auditor's latest verdict on it (None before the first)."""
    eid = s.episode_ids[i]
    flt = pc.field("episode_id") == eid
    rows = read_pile(lake, "sft", version=s.pile_version, filter=flt).to_pylist()
    if not rows:
        raise ValueError(f"episode {eid} is not in SFT pile version {s.pile_version}")
    ep = rows[0]
    steps, _, _ = episode_steps(lake, ep)
    verdicts = lake.read("verdicts", ["validator", "version", "passed", "reason", "score", "details"], filter=flt)
    mine = lake.read("audits", ["auditor", "verdict", "note", "recorded_at"],
                     filter=flt & (pc.field("auditor") == auditor)).to_pylist()  # fmt: skip
    latest = max(mine, key=lambda r: r["recorded_at"]) if mine else None
    return {"episode": ep, "steps": steps, "verdicts": verdicts.sort_by("validator").to_pylist(), "mine": latest}


def record_verdict(lake: Lake, s: Sample, i: int, auditor: str, verdict: str, note: str | None) -> bool:
    """Record one verdict (good | bad) with a note; True when it was new (the same verdict again is one row)."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not good or bad")
    row = {"episode_id": s.episode_ids[i], "seed": s.seed, "csv_round": s.round, "auditor": auditor,
           "verdict": verdict, "note": (note or "").strip() or None, "line": i + 1}  # fmt: skip
    added, _, errors = record_rows(lake, [row])
    if errors:
        raise ValueError(errors[0])
    return added == 1


def recorded(lake: Lake, s: Sample, auditor: str) -> set[str]:
    """Episode ids of the sample this auditor has judged."""
    ids = pa.array(list(s.episode_ids), pa.string())
    t = lake.read("audits", ["episode_id"], filter=pc.field("episode_id").isin(ids) & (pc.field("auditor") == auditor))
    return set(t.column("episode_id").to_pylist())
