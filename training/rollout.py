"""The policy acting in many environments at once: one batched forward pass per decoding step for all of them.

Used by rejection sampling, RL and evaluation alike, so the three see the same prompts, the same parsing and the
same termination rules. Every step keeps its prompt and response token ids and each token's log-probability.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from schemas.actions import ActionError, parse_action
from schemas.prompt import PromptConfig
from training.generate import sample
from training.prompt import Turn, encode_prompt, parse_answer, render_prompt


class Environment(Protocol):
    """What a rollout needs from an environment (training/envs.py adapts the sandbox to it, training/envs_miniwob.py
    MiniWoB++ in a browser). An environment may also have `close()`: it is called once its trajectory has ended
    (a browser slot goes back to its pool); and `screenshot()`, the current screen as a PNG, which a
    vision-language policy acts on (training/vlm.py). Search (training/search.py) needs `clone()`, an independent
    copy of the state; it uses `copier()` (a maker of many copies from one snapshot) and `state_key(observation)`
    (what tells two states apart, the screen included, where the screen does not show everything) when they are
    there."""

    def reset(self) -> str: ...  # the text observation
    def step(self, action: str) -> tuple[str, bool, str | None]: ...  # (observation, done, termination when done)
    def verify(self) -> tuple[bool, str]: ...  # (passed, reason)


class Reviewer(Protocol):
    """Interactive annotation: an annotator who sees each proposal before it runs. `review` returns None to accept
    the proposal, or the (thought, action) to run instead. `action` is "" when the proposal was unreadable."""

    def review(self, env: Environment, thought: str, action: str) -> tuple[str, str] | None: ...


@dataclass(frozen=True)
class TaskInfo:
    """A task as training sees it; `make_env` builds a fresh environment for one attempt."""

    task_id: str
    instruction: str
    family: str
    level: int
    step_limit: int
    make_env: Callable[[], Environment] = field(compare=False, repr=False)
    reference_answer: str | None = None
    screen_width: int | None = None
    screen_height: int | None = None
    payload: object = field(default=None, compare=False, repr=False)  # the backend's own task object
    app: str = "sandbox"  # what rollout files and episodes say the attempt ran in
    platform: str = "sandbox"
    max_concurrent: int | None = None  # the backend runs at most this many environments at once (a browser pool)


@dataclass
class StepRecord:
    observation: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    thought: str
    action: str  # the action text as written ("" when the answer did not follow the format)
    readable: bool
    proposal: tuple[str, str] | None = None  # interactive annotation: the model's (thought, action) when overridden
    decision: str | None = None  # interactive annotation: accepted | overridden
    image: bytes | None = None  # a VLM's step: the screenshot it saw, at its size (the prompt's image tokens)


@dataclass
class Trajectory:
    task: TaskInfo
    attempt: int
    policy_version: str
    steps: list[StepRecord] = field(default_factory=list)
    termination: str = "step_limit"  # finished | step_limit | unreadable_action
    passed: bool = False
    reason: str = ""
    final_answer: str | None = None
    reward: float | None = None  # filled by the reward function (RL)
    policy_step: int = 0  # RL: the number of updates the writing policy had made (an episode's age is measured in it)

    @property
    def n_agent_tokens(self) -> int:
        return sum(len(s.response_ids) for s in self.steps)


def _readable(action: str) -> bool:
    try:
        parse_action(action)
        return True
    except ActionError:
        return False


def final_answer(action: str) -> str | None:
    """The text of a finished(...) action (None for any other action or an unreadable one)."""
    try:
        a = parse_action(action)
    except ActionError:
        return None
    return a.text if a.kind == "finished" else None


def _vision_prompt(vision, tokenizer, task: TaskInfo, history: list[Turn], env, cfg: PromptConfig):  # noqa: ANN001, ANN202
    from training.vision import vision_prompt

    shot = getattr(env, "screenshot", None)
    if shot is None:
        raise ValueError(f"a vision-language policy acts on screenshots, and {task.app}'s environment gives none "
                         "(Environment.screenshot)")  # fmt: skip
    return vision_prompt(tokenizer, vision, task.instruction, history, shot(), cfg)


def run_episodes(
    model,  # noqa: ANN001
    tokenizer,  # noqa: ANN001
    tasks: Sequence[TaskInfo],
    *,
    attempts: int = 1,
    policy_version: str = "init",
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    prompt_cfg: PromptConfig = PromptConfig(),
    max_steps: int | None = None,
    seed: int = 0,
    batch_size: int = 256,
    on_step: Callable[[int], None] | None = None,
    reviewer: Callable[[TaskInfo], Reviewer] | None = None,
    policy_step: int = 0,
) -> list[Trajectory]:
    """`attempts` attempts at every task, all advancing in lockstep; returns trajectories in (task, attempt) order.

    An answer that does not follow `Thought: ...\\nAction: ...` or an action that does not parse ends the attempt
    (termination unreadable_action); otherwise the environment decides when it is done and how it ended, or the
    step limit does. A backend with `max_concurrent` (a browser pool) runs that many attempts at once, starting the
    next one as one ends; an environment's `close()`, if it has one, is called when its attempt ends.

    `reviewer(task)` makes the run interactive annotation: each attempt gets its own reviewer, which accepts each
    proposal or overrides it before it runs (an unreadable proposal is overridden too, not the end of the attempt);
    the steps then hold what ran, with the proposal and the decision.

    A vision-language model (one with `vision`, training/vlm.py, or a served one) sees the environment's screenshot
    instead of the text screen (training.vision.vision_prompt); the actions it writes are mapped from its coordinate
    convention to screen pixels before they run, so steps hold screen pixels like every other episode, and each
    step keeps the image it saw.
    """
    vision = getattr(model, "vision", None)
    gen = torch.Generator().manual_seed(seed)
    trajs = [Trajectory(t, a, policy_version, policy_step=policy_step) for t in tasks for a in range(attempts)]
    limit = min((t.max_concurrent for t in tasks if t.max_concurrent), default=None) or len(trajs)
    envs: list[Environment | None] = [t.task.make_env() for t in trajs[:limit]] + [None] * (len(trajs) - limit)
    obs = [e.reset() for e in envs[:limit] if e is not None] + [""] * (len(trajs) - limit)
    history: list[list[Turn]] = [[] for _ in trajs]
    reviewers = [reviewer(t.task) for t in trajs] if reviewer else None
    active = list(range(min(limit, len(trajs))))
    waiting = list(range(limit, len(trajs)))[::-1]  # a bounded backend starts these as running ones end

    def end(i: int) -> None:
        env, envs[i] = envs[i], None
        close = getattr(env, "close", None)
        if close is not None:
            close()

    try:
        while active:
            if vision is None:
                prompts = [
                    encode_prompt(
                        tokenizer, render_prompt(trajs[i].task.instruction, history[i], obs[i], prompt_cfg), prompt_cfg
                    )
                    for i in active
                ]
            else:
                prompts = [_vision_prompt(vision, tokenizer, trajs[i].task, history[i], envs[i], prompt_cfg)
                           for i in active]  # fmt: skip
            outs = sample(model, tokenizer, prompts, max_new_tokens, temperature, gen, batch_size)
            still = []
            for i, p, s in zip(active, prompts, outs):
                tr = trajs[i]
                env = envs[i]
                assert env is not None
                parsed = parse_answer(s.text) if s.finished else None
                thought, action = parsed if parsed else ("", "")
                if vision is not None and parsed:
                    action = vision.to_screen(action, p.screen)
                ok = parsed is not None and _readable(action)
                rec = StepRecord(
                    obs[i], list(p), s.token_ids, s.logprobs, s.text, thought, action if parsed else s.text, ok
                )
                if vision is not None:
                    rec.image = p.image
                if reviewers is not None:
                    override = reviewers[i].review(env, thought, action if ok else "")
                    rec.decision = "accepted" if override is None else "overridden"
                    if override is not None:
                        rec.proposal, (rec.thought, rec.action) = (thought, rec.action), override
                        thought, action, ok = rec.thought, rec.action, _readable(rec.action)
                        rec.readable = ok
                tr.steps.append(rec)
                if not ok:
                    tr.termination, tr.passed, tr.reason = "unreadable_action", False, "unreadable_action"
                    end(i)
                    continue
                history[i].append(Turn(obs[i], thought, action))
                obs[i], done, term = env.step(action)
                step_limit = min(tr.task.step_limit, max_steps or tr.task.step_limit)
                if done or len(tr.steps) >= step_limit:
                    tr.passed, tr.reason = env.verify()
                    tr.termination = (term or "finished") if done else "step_limit"
                    tr.final_answer = final_answer(action)
                    end(i)
                    continue
                still.append(i)
            if on_step:
                on_step(len(active) - len(still))
            while waiting and len(still) < limit:  # refill the freed places
                j = waiting.pop()
                envs[j] = trajs[j].task.make_env()
                obs[j] = envs[j].reset()  # type: ignore[union-attr]
                still.append(j)
            active = still
    finally:
        for i in range(len(envs)):  # an exception must not leave environments (browsers) held
            if envs[i] is not None:
                end(i)
    return trajs
