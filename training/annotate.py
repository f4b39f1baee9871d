"""Interactive annotation with the newest checkpoint: the model proposes every step, an annotator accepts or
overrides it before it runs (UI-TARS-2's interactive annotation; DESIGN.md, "people add data every round").

The annotator here is the backend's scripted expert (`EnvBackend.reviewer`), so the demo can run it unattended;
the session it produces is an ordinary interactive-annotation session file (proposals, decisions, overrides,
screenshots in the object store) and enters the lake only through the annotation reader, like a person's.
Why it matters for the flywheel: every round adds expert-quality steps on fresh tasks, exactly where the current
model goes wrong, and the override rate per round measures how far the model still is from the annotator.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.prompt import PromptConfig
from training.model import Policy
from training.procs import split_episodes
from training.rollout import Environment, Reviewer, TaskInfo, Trajectory

#: Rollout termination -> the annotation format's episode outcome.
_OUTCOME = {"finished": "finished", "step_limit": "step_limit"}


class ScriptedReviewer:
    """A scripted demonstrator as the annotator (training.rollout.Reviewer). `raw(env)` is the backend's own
    environment the expert acts on (None: do not review, the attempt failed outside the model); `same(raw,
    proposed, wanted)` says whether a proposal does what the expert would do. The expert is reset on the raw
    environment's task at the first step (a browser task knows its utterance only once it is loaded)."""

    def __init__(self, expert: Any, raw: Callable[[Any], Any], same: Callable[[Any, str, str], bool]) -> None:
        self.expert, self.raw, self.same = expert, raw, same
        self.started = False

    def review(self, env: Environment, thought: str, action: str) -> tuple[str, str] | None:
        raw = self.raw(env)
        if raw is None:
            return None
        if not self.started:
            self.expert.reset(raw.task)
            self.started = True
        d = self.expert.act(raw)  # once per step: the expert's memory follows the episode (counting tasks)
        return None if action and self.same(raw, action, d.action) else (d.thought, d.action)


@dataclass(frozen=True)
class AnnotationResult:
    path: str
    policy_version: str
    episodes: int
    steps: int
    accepted: int  # proposals the annotator let run
    passed: int  # annotated episodes the environment's verifier passed
    episodes_added: int
    wall_s: float

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


def to_session(
    trajs: Sequence[Trajectory], refs: Sequence[Sequence[tuple[str, str]]], annotator: str, session: str
) -> Any:
    """Reviewed trajectories (with per-step screenshot refs) -> an AnnotationSession. Step times are simulated with
    sandbox/rollout.py's `step_times` (speaking the thought, then acting), since nobody sat at the screen."""
    from ingest.formats.annotations import AnnotatedEpisode, AnnotatedStep, AnnotationSession, Override
    from sandbox.rollout import step_times
    from schemas.records import Proposal

    eps = []
    for tr, shots in zip(trajs, refs):
        rng = random.Random(f"annotate/{tr.task.task_id}/{tr.attempt}")
        t, steps = 0.5, []
        for s, (uri, sha) in zip(tr.steps, shots):
            t, _, t_end, t_next = step_times(rng, t, s.thought, s.action, pace=1.3)  # an annotator's pace (Interactive)
            proposed = s.proposal or (s.thought, s.action)
            common: dict[str, Any] = dict(observation=s.observation, screenshot_uri=uri, screenshot_sha256=sha,
                                          t_start=round(t, 3), t_end=round(t_end, 3))  # fmt: skip
            prop = (Proposal(proposed[0], proposed[1], tr.policy_version),)
            if s.decision == "accepted":
                steps.append(AnnotatedStep(prop, "accepted", accepted_index=0, **common))
            else:
                steps.append(AnnotatedStep(prop, "overridden", override=Override(s.thought, s.action), **common))
            t = t_next
        k = tr.task
        eps.append(
            AnnotatedEpisode(
                task_id=k.task_id,
                instruction=k.instruction,
                steps=tuple(steps),
                task_family=k.family,
                difficulty=k.level,
                reference_answer=k.reference_answer,
                app=k.app,
                platform=k.platform,
                screen_width=k.screen_width,
                screen_height=k.screen_height,
                outcome=_OUTCOME.get(tr.termination, "unknown"),
                final_answer=tr.final_answer,
            )  # fmt: skip
        )
    return AnnotationSession(session, annotator, group="expert", episodes=tuple(eps))


def annotate_round(
    lake,  # noqa: ANN001
    round: int,
    policy: Policy,
    tasks: Sequence[TaskInfo],
    landing: str | Path,
    reviewer: Callable[[TaskInfo], Reviewer],
    render: Callable[[TaskInfo, list[str]], list[bytes]],
    prompt_cfg: PromptConfig = PromptConfig(),
    max_new_tokens: int = 64,
    annotator: str = "scripted-annotator",
    on_step: Callable[[int], None] | None = None,
    render_threads: int = 1,
    processes: int = 1,
) -> AnnotationResult:
    """One session: `policy` proposes (greedy, its best guess) on every task, `reviewer` decides; the session file
    goes to `landing` and is ingested through the annotation reader (idempotent: same round, same session id).
    `processes`: processes of one thread each that act (training.procs.split_episodes; a reviewer that does not
    pickle keeps it in this process)."""
    from ingest.annotations import ingest_annotations
    from ingest.formats.annotations import write_annotation_session
    from training.sampling import attach_screenshots

    t0 = time.perf_counter()
    trajs = split_episodes(policy, tasks, processes, temperature=0.0, max_new_tokens=max_new_tokens,
                           prompt_cfg=prompt_cfg, on_step=on_step, reviewer=reviewer)  # fmt: skip
    trajs = [tr for tr in trajs if tr.steps]
    refs = attach_screenshots(lake, trajs, render, render_threads)
    session = f"ia-round{round}-{policy.version}"
    path = Path(landing) / f"{session}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_annotation_session(path, to_session(trajs, refs, annotator, session))
    res = ingest_annotations(lake, [path], round=round)
    steps = [s for tr in trajs for s in tr.steps]
    return AnnotationResult(
        str(path),
        policy.version,
        len(trajs),
        len(steps),
        sum(s.decision == "accepted" for s in steps),
        sum(tr.passed for tr in trajs),
        res.result.episodes_added,
        time.perf_counter() - t0,
    )
