"""verl's reward for flywheel's verl export: the project's own verifiers, 1.0 for a passing episode and 0.0 otherwise.

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` (its custom reward function
signature; `custom_reward_function.path=<this file>`, name `compute_score`) with the decoded response of one rollout.
`ground_truth` is what `flywheel export sft-verl` wrote into `reward_model.ground_truth` (`ground_truth(episode)`
here, so the export and the reward read one format): which verifier decides, and what it needs.

- "sandbox": the task is rebuilt from its seed and the response's actions are replayed in the sandbox; the
  environment's own verifier (sandbox.env.Env.verify, the verdict routing trusts) decides.
- "reference_answer": the answer of the response's last `finished(content=...)` against the task's reference, by
  the ReferenceAnswer validator (validators/outcome.py: normalised, fuzzy ratio >= 90).
- "none": no verifier can score this task outside its environment; compute_score refuses it in one line (a silent
  0 would teach the policy that every answer fails).

Actions are read in order from the response, as the policy writes them (`Action: ...` lines) or as tool calls of the
`gui_act` tool that verl's tool agent loop runs (`"action": "..."` arguments, training/verl_tool.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

VERIFIERS = ("sandbox", "reference_answer", "none")
_ACTION = re.compile(r'^[ \t]*Action:[ \t]*(?P<line>\S.*?)[ \t]*$|"action"\s*:\s*(?P<json>"(?:[^"\\]|\\.)*")', re.M)


def ground_truth(ep: dict[str, Any]) -> dict[str, Any]:
    """What the reward needs to score attempts at this episode's task (the export's `reward_model.ground_truth`)."""
    from sandbox.tasks import task_from_id

    task = task_from_id(ep.get("task_id") or "") if ep.get("platform") in (None, "sandbox") else None
    verifier = "sandbox" if task else ("reference_answer" if (ep.get("reference_answer") or "").strip() else "none")
    return {
        "verifier": verifier,
        "task": task.to_dict() if task else None,
        "task_id": ep.get("task_id"),
        "instruction": ep.get("instruction"),
        "reference_answer": ep.get("reference_answer"),
        "final_answer": ep.get("final_answer"),
        "actions": [s.get("action") for s in ep.get("steps") or []],
        "screen": [ep.get("screen_width"), ep.get("screen_height")],
    }


def actions_in(text: str) -> list[str]:
    """The actions of a response, in order: `Action: ...` lines and `"action": "..."` tool-call arguments."""
    out = []
    for m in _ACTION.finditer(text or ""):
        if m["line"] is not None:
            out.append(m["line"])
        else:
            try:
                out.append(json.loads(m["json"]))
            except json.JSONDecodeError:
                continue
    return out


def _final_answer(actions: list[str]) -> str | None:
    from schemas.actions import ActionError, parse_action

    for a in reversed(actions):
        try:
            act = parse_action(a)
        except ActionError:
            continue
        if act.kind == "finished":
            return act.text
    return None


def _sandbox(task: dict[str, Any], actions: list[str]) -> bool:
    from sandbox.env import Env
    from sandbox.tasks import Task

    env = Env(Task.from_dict(task))
    for a in actions:
        if env.step(a).done:
            break
    return env.done and env.verify().passed


def _reference(truth: dict[str, Any], actions: list[str]) -> bool:
    from schemas.records import Episode, Step
    from validators.outcome import ReferenceAnswer

    ep = Episode(session_id="verl", source="rollout", task_id=truth.get("task_id") or "?",
                 instruction=truth.get("instruction") or "?", steps=tuple(Step(index=i, action=a) for i, a in enumerate(actions)),
                 reference_answer=truth.get("reference_answer"), final_answer=_final_answer(actions))  # fmt: skip
    return ReferenceAnswer().check(ep).passed


def verify(truth: dict[str, Any], response: str) -> bool:
    """Whether `response` passes the task `truth` describes (ValueError, one line, when nothing can verify it)."""
    kind = truth.get("verifier")
    actions = actions_in(response)
    if kind == "sandbox":
        return _sandbox(truth["task"], actions)
    if kind == "reference_answer":
        return _reference(truth, actions)
    raise ValueError(f"task {truth.get('task_id')!r} has no verifier outside its environment (verifier={kind!r}); "
                     "leave rows whose ground truth says verifier 'none' out of RL")  # fmt: skip


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """verl's custom reward function: 1.0 when the response passes the task's verifier, else 0.0."""
    truth = json.loads(ground_truth) if isinstance(ground_truth, str) else dict(ground_truth)
    return 1.0 if verify(truth, solution_str) else 0.0
