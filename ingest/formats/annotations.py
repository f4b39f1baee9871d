"""Interactive-annotation sessions (format `flywheel.annotation/1`, UI-TARS-2 section 2.4.2): one JSON file each.

At every step the current model proposes one or more candidates (thought, action, model version); the annotator
accepts one (`decision="accepted"`, `accepted_index`) or overrides it with their own thought and action
(`decision="overridden"`, `override`); the chosen action is what ran. The contract is
schemas/annotation.schema.json; `ingest.annotations` turns a session into episodes (steps keep the executed
thought/action, the proposals, the decision and who decided), a sessions row (with the override rate) and
preference pairs (one per rejected proposal of each overridden step).

Writer:

    write_annotation_session(path, session: AnnotationSession | Mapping) -> Path   # the file written

It validates the session against the JSON Schema and the rules the reader applies (accepted index in range,
override with a non-empty thought and a parseable action) and raises ValueError before writing a bad file.

Example:

    from ingest.formats.annotations import *
    step = AnnotatedStep(proposals=(Proposal("Open File.", "click(point='<point>5 5</point>')", "ckpt-3"),),
                         decision="overridden",
                         override=Override("The menu is Edit, not File.", "click(point='<point>40 5</point>')"))
    s = AnnotationSession("s-001", "alice", episodes=(AnnotatedEpisode("t1", "Copy the text", (step,)),))
    write_annotation_session("s-001.json", s)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from ingest.safejson import non_finite
from schemas.actions import ActionError, parse_action
from schemas.records import Proposal

FORMAT = "flywheel.annotation/1"
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "annotation.schema.json"

__all__ = [
    "FORMAT",
    "AnnotatedEpisode",
    "AnnotatedStep",
    "AnnotationSession",
    "Override",
    "Proposal",
    "check_episode",
    "check_session_header",
    "write_annotation_session",
]


@dataclass(frozen=True)
class Override:
    """The annotator's own step, replacing the model's proposals. The thought is required: it is the label."""

    thought: str
    action: str


@dataclass(frozen=True)
class AnnotatedStep:
    proposals: tuple[Proposal, ...]
    decision: Literal["accepted", "overridden"]
    accepted_index: int | None = None
    override: Override | None = None
    decided_by: str | None = None  # default: the session's annotator
    observation: str | None = None
    screenshot_uri: str | None = None
    screenshot_sha256: str | None = None
    t_start: float | None = None
    t_end: float | None = None

    def executed(self) -> tuple[str, str]:
        """(thought, action) that ran: the accepted proposal or the override."""
        if self.decision == "accepted":
            p = self.proposals[self.accepted_index or 0]
            return p.thought, p.action
        assert self.override is not None
        return self.override.thought, self.override.action


@dataclass(frozen=True)
class AnnotatedEpisode:
    task_id: str
    instruction: str
    steps: tuple[AnnotatedStep, ...]
    task_family: str | None = None
    difficulty: int | None = None
    reference_answer: str | None = None
    app: str | None = None
    platform: str | None = None
    screen_width: int | None = None
    screen_height: int | None = None
    outcome: str | None = "ended"
    final_answer: str | None = None


@dataclass(frozen=True)
class AnnotationSession:
    session_id: str
    annotator: str
    group: Literal["expert", "novice"] | None = None
    episodes: tuple[AnnotatedEpisode, ...] = field(default_factory=tuple)
    started_at: str | None = None
    tool_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}


@lru_cache(maxsize=1)
def _validators() -> tuple[Any, Any]:
    """Validators for the session header (episodes not descended) and for one episode."""
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text())
    header = {**schema, "properties": {**schema["properties"], "episodes": {"type": "array"}}}
    episode = {**schema["$defs"]["episode"], "$defs": schema["$defs"]}
    return Draft202012Validator(header), Draft202012Validator(episode)


def _schema_problem(validator: Any, doc: Any) -> tuple[str, str] | None:
    err = next(iter(sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))), None)
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "(top)"
    path = list(err.absolute_path)
    if "override" in path and (
        path[-1] == "thought" or (err.validator == "required" and "thought" in str(err.message))
    ):
        return "override_without_thought", f"{where}: an override needs the annotator's thought ({err.message})"
    code = {"required": "missing_field", "type": "wrong_type"}.get(str(err.validator), "schema")
    return code, f"{where}: {err.message}"


def check_session_header(doc: Any) -> tuple[str, str] | None:
    """Problems of the session fields (not its episodes) as (error_type, message), or None."""
    if not isinstance(doc, Mapping):
        return "wrong_type", f"a session must be a JSON object, got {type(doc).__name__}"
    bad = non_finite({k: v for k, v in doc.items() if k != "episodes"})
    if bad:
        return "non_finite_number", f"{bad}: NaN or infinity (numbers must be finite)"
    return _schema_problem(_validators()[0], doc)


def check_episode(ep: Any) -> tuple[str, str] | None:
    """The first problem of one annotated episode as (error_type, message), or None when it can be ingested.

    Beyond the JSON Schema: the accepted index must point at a proposal, an override needs a thought, and the
    executed action (accepted proposal or override) must follow the action grammar.
    """
    bad = non_finite(ep)
    if bad:  # like a rollout line's NaN: this episode is quarantined, the rest of the session lands
        return "non_finite_number", f"{bad}: NaN or infinity (numbers must be finite)"
    problem = _schema_problem(_validators()[1], ep)
    if problem:
        return problem
    for i, s in enumerate(ep["steps"]):
        if s["decision"] == "accepted":
            k = s.get("accepted_index")
            if k is None:
                return "missing_field", f"steps/{i}: accepted without accepted_index"
            if not 0 <= k < len(s["proposals"]):
                return (
                    "accepted_index_out_of_range",
                    f"steps/{i}: accepted_index {k} but {len(s['proposals'])} proposal(s)",
                )
            action = s["proposals"][k]["action"]
        else:
            o = s.get("override")
            if o is None:
                return "missing_field", f"steps/{i}: overridden without an override"
            if not o.get("thought", "").strip():
                return "override_without_thought", f"steps/{i}: an override needs the annotator's thought"
            action = o["action"]
        try:
            parse_action(action)
        except ActionError as e:
            code = "unknown_action_kind" if "unknown action kind" in str(e) else "bad_action"
            return code, f"steps/{i}: executed action {action[:80]!r}: {e}"
    return None


def write_annotation_session(path: str | Path, session: AnnotationSession | Mapping[str, Any]) -> Path:
    """Validate and write one session file (UTF-8 JSON); raise ValueError naming the first problem."""
    doc = session.to_dict() if isinstance(session, AnnotationSession) else {"format": FORMAT, **session}
    doc = json.loads(json.dumps(doc, allow_nan=False))  # tuples -> lists, as a reader will see them
    problem = check_session_header(doc)
    for i, ep in enumerate(doc.get("episodes") or []):
        if problem:
            break
        p = check_episode(ep)
        problem = p and (p[0], f"episodes/{i}/{p[1]}")
    if problem:
        raise ValueError(f"annotation session {doc.get('session_id')!r}: {problem[0]}: {problem[1]}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=1), encoding="utf-8")
    return path
