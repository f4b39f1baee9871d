"""A finished interactive-annotation session -> a `flywheel.annotation/1` file in the landing area -> the lake.

The file is written with the annotation format's own writer (it validates first) into `<landing>/annotations/`,
where a round's landing intake looks for session files, and is ingested at once through the annotation reader
(`ingest.annotations.ingest_annotations`): overrides become preference pairs there, the annotator a pseudonym.
Ingesting the same file again adds nothing, so the round's own intake finding it later is harmless.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.people.upload import Landing
from flywheel.workbench.live import LiveSession
from storage.lake import Lake
from storage.objects import sha256_hex

ANNOTATIONS = "annotations"


@dataclass(frozen=True)
class Landed:
    session_id: str
    landed_uri: str
    episodes_added: int
    pairs_added: int
    quarantined: int
    override_rate: float | None


def to_session(lake: Lake, s: LiveSession, group: str | None = None) -> Any:
    """The live session as an AnnotationSession; its screenshots go to the lake's object store."""
    from ingest.formats.annotations import AnnotatedEpisode, AnnotatedStep, AnnotationSession, Override
    from sandbox.export import ANNOTATION_OUTCOME, APP, PLATFORM
    from schemas.records import Proposal

    if not s.steps:
        raise ValueError("the session has no steps yet: act at least once before finishing")
    steps = []
    for st in s.steps:
        props = tuple(Proposal(p.thought, p.action, p.model_version, p.score) for p in st.proposals)
        common: dict[str, Any] = dict(observation=st.observation, t_start=st.t_start, t_end=st.t_end,
                                      screenshot_uri=lake.objects.put_object(st.screenshot, ".png"),
                                      screenshot_sha256=sha256_hex(st.screenshot))  # fmt: skip
        if st.decision == "accepted":
            steps.append(AnnotatedStep(props, "accepted", accepted_index=st.accepted_index, **common))
        else:
            steps.append(AnnotatedStep(props, "overridden", override=Override(st.thought, st.action), **common))
    t, env = s.task, s.env
    outcome = ANNOTATION_OUTCOME.get(env.outcome or "", "unknown") if env.done else "unknown"
    ep = AnnotatedEpisode(
        task_id=t.task_id, instruction=t.instruction, steps=tuple(steps), task_family=t.family, difficulty=t.level,
        reference_answer=t.reference_answer, app=APP, platform=PLATFORM, screen_width=t.width, screen_height=t.height,
        outcome=outcome, final_answer=env.answer,
    )  # fmt: skip
    return AnnotationSession(s.session_id, s.owner, group=group, episodes=(ep,), tool_version="flywheel-workbench")


def land_session(lake: Lake, landing: Landing, s: LiveSession, round: int, group: str | None = None) -> Landed:
    """Write the session file into the landing area and ingest it into `round`."""
    from ingest.annotations import ingest_annotations
    from ingest.formats.annotations import write_annotation_session

    session = to_session(lake, s, group)
    rel = f"{ANNOTATIONS}/{s.session_id}.json"
    if landing.uri.scheme == "file":  # ingested where it lies, so its sessions row names the landed file
        path = Path(landing.uri.key(rel))
        path.parent.mkdir(parents=True, exist_ok=True)
        res = ingest_annotations(lake, [write_annotation_session(path, session)], round=round)
    else:
        with tempfile.TemporaryDirectory(prefix="flywheel-workbench-") as tmp:
            path = write_annotation_session(Path(tmp) / f"{s.session_id}.json", session)
            landing.store.put_bytes(rel, path.read_bytes())
            res = ingest_annotations(lake, [path], round=round)
    row = res.sessions[0] if res.sessions else {}
    return Landed(s.session_id, landing.uri.join(rel), res.result.episodes_added, res.pairs_added,
                  res.result.quarantined_added, row.get("override_rate"))  # fmt: skip
