"""Sandbox attempts -> the three ingestion input formats, through the ingestion package's own writers.

    think-aloud bundle   write_think_aloud(attempt, out_dir)            ingest/formats/bundle.py
    annotation session   write_annotations(attempts, path, annotator)   ingest/formats/annotations.py
    rollout file         write_rollout_file(attempts, path, policy_version)  ingest/formats/rollouts.py

Each attempt becomes what a real recorder, annotation tool or sampler would produce, so the demo and the
ingestion tests exercise the real readers. Think-aloud thoughts are spoken with espeak-ng when it is
installed (text-only transcript otherwise); the action becomes raw mouse/keyboard events that the event
reducer turns back into the same action. A finished(content=...) step has no events: its answer is kept in
the manifest's meta ("final_answer").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sandbox.rollout import Attempt
from schemas.actions import ActionError, parse_action

#: Env outcome -> rollout termination / annotation outcome (both formats lack "ended": the task reached a
#: terminal state on its own, which for a rollout is a finished episode).
#: The app and platform written into every export (another backend passes its own: sandbox/miniwob/export.py).
APP, PLATFORM = "flywheel-sandbox", "sandbox"

TERMINATION = {
    "finished": "finished",
    "ended": "finished",
    "step_limit": "step_limit",
    "unreadable_action": "unreadable_action",
}
ANNOTATION_OUTCOME = {"finished": "finished", "ended": "ended", "step_limit": "step_limit"}


def session_id(*parts: object) -> str:
    """A bundle-safe id ([A-Za-z0-9._-]) that is stable for the same parts."""
    raw = "-".join(str(p) for p in parts)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-")[:96]
    return f"{slug}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def action_events(action: str) -> list[dict[str, Any]]:
    """Raw input events that reproduce one action (empty for finished/wait and for unreadable actions)."""
    from ingest.formats import bundle as B

    try:
        a = parse_action(action)
    except ActionError:
        return []
    if a.kind == "click":
        return B.click_events(a.x, a.y)  # type: ignore[arg-type]
    if a.kind == "left_double":
        return B.double_click_events(a.x, a.y)  # type: ignore[arg-type]
    if a.kind == "right_single":
        return B.right_click_events(a.x, a.y)  # type: ignore[arg-type]
    if a.kind == "drag":
        return B.drag_events(a.x, a.y, a.x2, a.y2)  # type: ignore[arg-type]
    if a.kind == "type":
        return B.type_events(a.text or "")
    if a.kind == "hotkey":
        keys = ["esc" if k == "escape" else k for k in (a.key or "").split()]
        return B.hotkey_events(*keys)
    if a.kind == "scroll":
        return B.scroll_events(a.x, a.y, a.direction or "down")  # type: ignore[arg-type]
    return []


def _meta(a: Attempt) -> dict[str, Any]:
    t = a.task
    return {
        "sandbox_task": t.to_dict(), "final_answer": a.final_answer, "env_passed": a.passed,
        "env_reward": a.reward, "verdict_reason": a.verdict.reason, "outcome": a.outcome, "attempt": a.attempt,
    }  # fmt: skip


def write_think_aloud(
    a: Attempt,
    out_dir: str | Path,
    annotator_id: str | None = None,
    speech: bool = True,
    archive: str | None = None,
    app: str = APP,
    platform: str = PLATFORM,
    voice: str = "en-us",
    wpm: int = 150,
    gap_s: float = 0.6,
) -> Path:
    """One attempt -> one think-aloud bundle (folder, or .zip/.tar.gz with `archive`). Screenshots are
    included when the attempt was run with screenshots=True. `app`/`platform` name the environment backend;
    voice (espeak-ng), wpm and gap_s (the pause around each action) shape the spoken thoughts. The element
    names of the text observations go into the manifest's `elements` (they prime ASR)."""
    from ingest.formats.bundle import BundleManifest, ScriptedStep, build_think_aloud_bundle

    t = a.task
    sid = session_id("ta", t.task_id, a.policy, a.attempt)
    m = BundleManifest(
        session_id=sid, instruction=t.instruction, screen_width=t.width, screen_height=t.height,
        annotator_id=annotator_id or f"sandbox-{a.policy}", group=a.policy if a.policy in ("expert", "novice") else None,
        task_id=t.task_id, app=app, platform=platform, meta=_meta(a), elements=element_names(a),
    )  # fmt: skip
    steps = [ScriptedStep(s.thought, action_events(s.action), s.screenshot) for s in a.steps]
    return build_think_aloud_bundle(Path(out_dir) / sid, m, steps, gap_s=gap_s, archive=archive, speech=speech,
                                    voice=voice, wpm=wpm)  # fmt: skip


def element_names(a: Attempt) -> tuple[str, ...]:
    """The names of the elements listed on the attempt's text screens, in order of first appearance."""
    from schemas.prompt import SCREEN_LINE

    names: dict[str, None] = {}
    for s in a.steps:
        for line in (s.observation or "").splitlines():
            m = SCREEN_LINE.match(line.strip())
            if m and m["name"]:
                names.setdefault(m["name"], None)
    return tuple(names)


def write_annotations(
    attempts: Sequence[Attempt],
    path: str | Path,
    annotator: str = "sandbox-annotator",
    model_version: str = "sandbox-novice",
    session: str | None = None,
    app: str = APP,
    platform: str = PLATFORM,
) -> Path:
    """Attempts run with demonstrators.Interactive -> one interactive-annotation session file."""
    from ingest.formats.annotations import (
        AnnotatedEpisode,
        AnnotatedStep,
        AnnotationSession,
        Override,
        write_annotation_session,
    )
    from schemas.records import Proposal

    eps = []
    for a in attempts:
        steps = []
        for s in a.steps:
            if s.proposal is None or s.decision is None:
                raise ValueError(f"{a.task.task_id}: attempt was not run with demonstrators.Interactive (no proposals)")
            prop = (Proposal(s.proposal[0], s.proposal[1], model_version),)
            common = dict(observation=s.observation, t_start=s.t_start, t_end=s.t_end)
            if s.decision == "accepted":
                steps.append(AnnotatedStep(prop, "accepted", accepted_index=0, **common))  # type: ignore[arg-type]
            else:
                steps.append(AnnotatedStep(prop, "overridden", override=Override(s.thought, s.action), **common))  # type: ignore[arg-type]
        t = a.task
        eps.append(
            AnnotatedEpisode(
                task_id=t.task_id,
                instruction=t.instruction,
                steps=tuple(steps),
                task_family=t.family,
                difficulty=t.level,
                reference_answer=t.reference_answer,
                app=app,
                platform=platform,
                screen_width=t.width,
                screen_height=t.height,
                outcome=ANNOTATION_OUTCOME.get(a.outcome, "unknown"),
                final_answer=a.final_answer,
            )  # fmt: skip
        )
    sid = session or session_id("ia", annotator, *(a.task.task_id for a in attempts[:3]), len(attempts))
    return write_annotation_session(path, AnnotationSession(sid, annotator, group="expert", episodes=tuple(eps)))


def to_rollout(
    a: Attempt,
    policy_version: str,
    group_id: str | None = None,
    run_id: str | None = None,
    logprobs: Sequence[tuple[float | None, Sequence[float] | None]] | None = None,
    app: str = APP,
    platform: str = PLATFORM,
) -> Any:
    """One attempt -> an ingest.formats.rollouts.RolloutAttempt. `logprobs[i] = (sum, per-token)` per step,
    for model policies that have them."""
    from ingest.formats.rollouts import RolloutAttempt, RolloutStep

    steps = []
    for i, s in enumerate(a.steps):
        lp_sum, lp_tok = logprobs[i] if logprobs is not None else (None, None)
        steps.append(
            RolloutStep(
                action=s.action,
                thought=s.thought,
                observation=s.observation,
                t_start=s.t_start,
                t_end=s.t_end,
                logprob_sum=lp_sum,
                token_logprobs=tuple(lp_tok) if lp_tok is not None else None,
                reward=s.reward,
            )  # fmt: skip
        )
    t = a.task
    return RolloutAttempt(
        task_id=t.task_id, group_id=group_id or f"{t.task_id}#{policy_version}", attempt=a.attempt,
        policy_version=policy_version, instruction=t.instruction, steps=tuple(steps),
        termination=TERMINATION.get(a.outcome, "finished"), reward=a.reward, passed=a.passed,  # type: ignore[arg-type]
        final_answer=a.final_answer, task_family=t.family, difficulty=t.level, reference_answer=t.reference_answer,
        app=app, platform=platform, screen_width=t.width, screen_height=t.height, run_id=run_id,
    )  # fmt: skip


def write_rollout_file(
    attempts: Iterable[Attempt], path: str | Path, policy_version: str, run_id: str | None = None, format: str = "jsonl"
) -> int:
    """Attempts -> one rollout file (JSONL or Parquet); returns how many were written."""
    from ingest.formats.rollouts import write_rollouts

    return write_rollouts(path, (to_rollout(a, policy_version, run_id=run_id) for a in attempts), format=format)  # type: ignore[arg-type]
