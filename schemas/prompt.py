"""The report's prompt (the text format between the data and the policy, so ingest, exports and training
all render the same strings): instruction, the last N steps in full, the current observation -> `Thought: ...\nAction: ...`.

One function renders a state into a prompt string and one renders the agent's answer; `training.prompt` tokenizes
them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PromptConfig:
    """The report's prompt: instruction, the last N steps in full, the current observation."""

    history_full: int = 1  # the last N steps shown with their observation; older ones with thought and action only
    history_max: int = 8  # past steps beyond this are dropped (oldest first)
    history_thought_words: int = 0  # words of each past step's thought shown (0: actions only, the CPU default)
    max_prompt_tokens: int = 768  # left-truncated (the instruction line is kept) beyond this
    max_thought_words: int = 16  # thoughts longer than this are cut in targets (keeps generation short)
    #: "expert": the demonstrator's own thought (clipped); "target": a fixed template naming the element the action
    #: points at exactly as the screen lists it (`button "Save"`), so the coordinates to write follow those same
    #: tokens in the observation - copying them is one attention hop for a small model; "line": that element's whole
    #: line (`button "Save" (80,48)`), so the thought continues a span of the screen and the action copies the
    #: centre from a fixed distance back (see docs/training.md for what each measured).
    thought_style: str = "expert"
    #: Steps without a text observation (think-aloud recordings have only screenshots) are not training examples
    #: for a text policy: it would learn to act on a screen it cannot see.
    skip_without_observation: bool = True


@dataclass(frozen=True)
class Turn:
    """One past step as the prompt shows it."""

    observation: str | None
    thought: str
    action: str


def clip_thought(thought: str, max_words: int) -> str:
    words = (thought or "").split()
    return " ".join(words[:max_words])


def render_prompt(
    instruction: str, history: Sequence[Turn], observation: str | None, cfg: PromptConfig = PromptConfig()
) -> str:
    """The state at one step. Older steps show thought and action; the last `history_full` also their screen."""
    lines = [f"Instruction: {instruction.strip()}"]
    past = list(history)[-cfg.history_max :] if cfg.history_max else []
    first = len(history) - len(past)
    for i, t in enumerate(past):
        n = first + i + 1
        full = i >= len(past) - cfg.history_full
        if full and t.observation:
            lines.append(f"Step {n} observation:\n{t.observation.strip()}")
        thought = clip_thought(t.thought, cfg.history_thought_words)
        lines.append(f"Step {n}: " + (f"Thought: {thought} " if thought else "") + f"Action: {t.action}")
    lines.append(f"Observation:\n{(observation or '').strip()}")
    return "\n".join(lines) + "\n"


def _parsed(action: str):  # noqa: ANN202 - schemas.actions.Action | None
    from schemas.actions import ActionError, parse_action

    try:
        return parse_action(action.strip())
    except ActionError:
        return None


#: One element of a text screen: `<role> "<name>" ... (<x>,<y>)` (head = role and name; x, y = its centre).
SCREEN_LINE = re.compile(r'^(?P<head>(?P<role>\w+) "(?P<name>[^"]*)").*\((?P<x>\d+),(?P<y>\d+)\)\s*$')


def target_thought(action: str, observation: str | None, full_line: bool = False) -> str | None:
    """`<role> "<name>"` of the listed element whose centre the action points at (with `full_line`, its whole line
    as the screen lists it, state and centre included); None when there is none."""
    a = _parsed(action)
    if a is None or a.x is None or not observation:
        return None
    for line in observation.splitlines():
        m = SCREEN_LINE.match(line.strip())
        if m and (int(m["x"]), int(m["y"])) == (a.x, a.y):
            return line.strip() if full_line else m["head"]
    return None


_FOCUSED = re.compile(r'^\w+ "(?P<name>[^"]*)".* focused\b')


def typed_span(action: str, observation: str | None, instruction: str | None) -> str | None:
    """`<field> '<text>'` for a type action into the focused field named <field> whose text the instruction asks
    for: the sandbox's forms spell the span itself (`Email 'a@b.c'`, and a value quoted for another field is not
    this one's); MiniWoB++ quotes the text in double quotes or not at all (`Enter "Kasey" into the text field`).
    One shape for every typed step, so the model learns one copy. None when the instruction has no such text."""
    a = _parsed(action)
    if a is None or a.kind != "type" or not a.text or not observation or not instruction:
        return None
    for line in observation.splitlines():
        m = _FOCUSED.match(line.strip())
        if not m:
            continue
        span = f"{m['name']} '{a.text}'"
        if span in instruction or (a.text in instruction and f"'{a.text}'" not in instruction):
            return span
    return None


def answer_line(action: str, observation: str | None) -> str | None:
    """The screen line an answer is read from, for `finished(content=...)` whose content the screen shows as a
    quoted value (`text "Customer" value="Alice Kowalski" (102,72)`); None otherwise."""
    a = _parsed(action)
    if a is None or a.kind != "finished" or not a.text or not observation:
        return None
    return next((ln.strip() for ln in observation.splitlines() if f'"{a.text}"' in ln), None)


def render_answer(thought: str, action: str, cfg: PromptConfig = PromptConfig(), observation: str | None = None,
                  instruction: str | None = None) -> str:  # fmt: skip
    if cfg.thought_style in ("target", "line"):
        target = target_thought(action, observation, full_line=cfg.thought_style == "line")
        if cfg.thought_style == "line":
            target = target or typed_span(action, observation, instruction) or answer_line(action, observation)
            if target:  # never clipped: a screen line ends with the centre or value, a typed span with the text
                return f"Thought: {target}\nAction: {action.strip()}"
        thought = target or thought
    return f"Thought: {clip_thought(thought, cfg.max_thought_words)}\nAction: {action.strip()}"


def consistent(thought: str, action: str, cfg: PromptConfig, observation: str | None, instruction: str | None) -> bool:
    """Whether the thought is the one the prompt format writes for this action (the target's screen line, the typed
    span, the answer's line): a thought naming another element than the action reaches is not. Always true for
    free-form thought styles and for actions the format has no fixed thought for."""
    if cfg.thought_style not in ("target", "line"):
        return True
    want = parse_answer(render_answer(thought, action, cfg, observation, instruction))
    return want is not None and want[0].strip() == thought.strip()


_ANSWER = re.compile(r"^\s*Thought:(?P<thought>.*?)\n\s*Action:(?P<action>.*)$", re.S)


def parse_answer(text: str) -> tuple[str, str] | None:
    """`Thought: ...\nAction: ...` -> (thought, action), or None when the model did not follow the format."""
    m = _ANSWER.match(text)
    if not m:
        return None
    action = m.group("action").strip().split("\n", 1)[0].strip()
    return m.group("thought").strip(), action
