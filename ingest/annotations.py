"""Interactive-annotation sessions (flywheel.annotation/1) -> episodes, a sessions row, preference pairs.

Each episode's steps keep what ran (the accepted proposal or the annotator's override) together with every
proposal, the decision, the accepted index and who decided. A bad episode is quarantined on its own (locator
`episodes/<i>`), the rest of the session lands; a file that is not a readable session is quarantined whole.
Sessions are small (one annotator, minutes to hours), so this path works on records, not columns.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from core import PIPELINE_VERSION
from core.errors import InputError
from ingest import safejson
from ingest.formats.annotations import FORMAT, check_episode, check_session_header
from ingest.land import LandResult, Quarantined, land
from ingest.pii import pseudonym, redact
from ingest.preferences import pairs_table
from schemas.actions import parse_action
from schemas.records import Episode, Proposal, Step
from storage.lake import Lake

SOURCE = "interactive"


@dataclass
class SessionRead:
    """What one session file became (nothing written yet)."""

    path: str
    session: dict[str, Any]  # the sessions row
    episodes: list[Episode] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    pairs: pa.Table | None = None


def _step(k: int, s: dict[str, Any], annotator: str | None) -> Step:
    proposals = tuple(
        Proposal(p["thought"], p["action"], p.get("model_version"), p.get("score")) for p in s["proposals"]
    )
    if s["decision"] == "accepted":
        p = proposals[s["accepted_index"]]
        thought, action = p.thought, p.action
        raw = None
    else:
        raw = s["override"]["thought"]
        thought, action = redact(raw) or "", s["override"]["action"]
    return Step(
        index=k,
        action=action,
        thought=thought,
        thought_flag="pii_redacted" if raw is not None and raw != thought else None,  # the raw text never lands
        t_start=s.get("t_start"),
        t_end=s.get("t_end"),
        observation=s.get("observation"),
        screenshot_uri=s.get("screenshot_uri"),
        screenshot_sha256=s.get("screenshot_sha256"),
        proposals=proposals,
        decision=s["decision"],
        accepted_index=s.get("accepted_index") if s["decision"] == "accepted" else None,
        decided_by=pseudonym(s.get("decided_by")) if s.get("decided_by") else annotator,
    )


def _episode(doc: dict[str, Any], i: int, ep: dict[str, Any], annotator: str | None, round: int, path: str) -> Episode:
    steps = tuple(_step(k, s, annotator) for k, s in enumerate(ep["steps"]))
    versions = [p.model_version for s in steps for p in (s.proposals or ()) if p.model_version]
    final = ep.get("final_answer")
    if final is None and steps:
        last = parse_action(steps[-1].action)
        final = last.text if last.kind == "finished" else None
    return Episode(
        session_id=doc["session_id"],
        source=SOURCE,
        task_id=ep["task_id"],
        instruction=ep["instruction"],
        steps=steps,
        round=round,
        task_family=ep.get("task_family"),
        difficulty=ep.get("difficulty"),
        app=ep.get("app"),
        platform=ep.get("platform"),
        screen_width=ep.get("screen_width"),
        screen_height=ep.get("screen_height"),
        annotator=annotator,
        group=doc.get("group"),
        policy_version=versions[0] if versions else None,
        attempt=i,  # the episode's place in the session: two identical runs stay two episodes
        reference_answer=ep.get("reference_answer"),
        final_answer=final,
        outcome=ep.get("outcome") or "ended",
        meta={"file": path, "episode_index": i, "tool_version": doc.get("tool_version")},
    )


def read_session(path: str | Path, *, round: int = 0) -> SessionRead:
    """Read and check one session file; never raises on bad content (it becomes Quarantined items)."""
    path = Path(path)
    uri = str(path)
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    now = datetime.now(UTC)
    row: dict[str, Any] = {
        "session_id": f"interactive-{sha[:24]}",
        "source": SOURCE,
        "status": "quarantined",
        "landed_uri": uri,
        "content_sha256": sha,
        "round": round,
        "n_episodes": 0,
        "n_actions": 0,
        "problems": [],
        "pipeline_version": PIPELINE_VERSION,
        "ingested_at": now,
    }
    out = SessionRead(uri, row)

    def bad(code: str, msg: str, locator: str | None = None) -> None:
        out.quarantined.append(Quarantined(SOURCE, uri, code, msg, locator=locator, round=round))
        row["problems"].append(f"{code}" + (f" at {locator}" if locator else ""))

    try:
        doc = safejson.loads(raw, "the session file")  # NaN / Infinity: per episode, in check_episode
    except InputError as e:  # too deep or too large
        bad(e.code, e.message)
        return out
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        bad("invalid_json", f"not a JSON file: {e}")
        return out
    problem = check_session_header(doc)
    if problem:
        bad(problem[0], f"session: {problem[1]}" + (f" (expected format {FORMAT})" if "format" in problem[1] else ""))
        return out
    annotator = pseudonym(doc["annotator"])
    row.update(session_id=doc["session_id"], annotator=annotator, group=doc.get("group"))
    for i, ep in enumerate(doc["episodes"]):
        p = check_episode(ep)
        if p:
            bad(p[0], f"episodes/{i}: {p[1]}", locator=f"episodes/{i}")
            continue
        out.episodes.append(_episode(doc, i, ep, annotator, round, uri))
    steps = [s for e in out.episodes for s in e.steps]
    durations = [
        e.steps[-1].t_end - e.steps[0].t_start
        for e in out.episodes
        if e.steps and e.steps[0].t_start is not None and e.steps[-1].t_end is not None
    ]
    row.update(
        status="landed",
        n_episodes=len(out.episodes),
        n_actions=len(steps),
        duration_s=sum(durations) if durations else None,
        override_rate=(sum(s.decision == "overridden" for s in steps) / len(steps)) if steps else None,
    )
    out.pairs = pairs_table(out.episodes)
    return out


@dataclass
class AnnotationIngest:
    files: int
    result: LandResult
    pairs_added: int
    sessions: list[dict[str, Any]]


def session_files(paths: list[str | Path]) -> list[Path]:
    """Expand folders to the *.json files under them (sorted); files are taken as given."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*.json") if q.is_file()))
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    return out


def land_session(lake: Lake, s: SessionRead) -> tuple[LandResult, int]:
    """Write one read session: quarantine, episodes, preference pairs, then the sessions row (last)."""
    pairs = lake.append("preference_pairs", s.pairs) if s.pairs is not None and s.pairs.num_rows else 0
    res = land(lake, s.episodes or None, [s.session], s.quarantined)
    return res, pairs


def ingest_annotations(
    lake: Lake, paths: list[str | Path], *, round: int = 0, progress: Any = None
) -> AnnotationIngest:
    """Ingest session files and folders of them; idempotent (episode ids, pair ids and session ids are stable)."""
    files = session_files(paths)
    total = LandResult()
    pairs = 0
    sessions = []
    for k, f in enumerate(files):
        s = read_session(f, round=round)
        res, n = land_session(lake, s)
        total += res
        pairs += n
        sessions.append(s.session)
        if progress:
            progress(k + 1, len(files), total.episodes_added)
    return AnnotationIngest(len(files), total, pairs, sessions)
