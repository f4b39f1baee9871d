"""Exploration by the screen: every action a text screen offers, for search at the policy's own states.

Sampling G answers at a state finds the right action only when the policy already gives it some probability: at
the sandbox policy's mistakes, 25-45% of the states had any of 8 samples make progress (docs/training.md,
"Practice"), because its errors are grounding (the right plan on the wrong element), and a wrong element is
what it samples again. A text screen lists every element with its centre, so the whole action space of a state
is small and known: a click on each element, each text the instruction quotes typed, each value on the screen
reported, each list scrolled, the two keys the screens use. Trying them all in a copy of the state (the
environment's `clone`) and keeping the ones the environment scores as progress is search with the environment's
reward, as in expert iteration (Anthony et al. 2017) and AlphaZero's policy targets: the policy then learns
from what the search found at its own states, which no fixed expert data shows it.
"""

from __future__ import annotations

import re

from schemas.actions import Action, format_action
from schemas.prompt import SCREEN_LINE

_QUOTED = re.compile(r"'([^']+)'")
_VALUE = re.compile(r'value="([^"]+)"')
_WINDOW = re.compile(r'^window ".*" (?P<w>\d+)x(?P<h>\d+)')
KEYS = ("escape", "ctrl a")  # the sandbox screens' keys: close a menu or dropdown, select a field's text


def screen_actions(observation: str | None, instruction: str | None) -> list[str]:
    """The actions a text screen offers, each once, in screen order: click every listed element, scroll every list
    and a page taller than the window both ways, type each quoted span of the instruction, report each value the screen shows, press the screens'
    keys. The environment judges which of them help; this only has to contain the right one."""
    if not observation:
        return []
    out: list[Action] = []
    size = None
    for line in observation.splitlines():
        w = _WINDOW.match(line.strip())
        size = size or (w and (int(w["w"]) // 2, int(w["h"]) // 2))
        if line.strip().startswith("page more") and size:  # a page taller than the window scrolls as a whole
            out += [Action("scroll", x=size[0], y=size[1], direction=d) for d in ("down", "up")]
        m = SCREEN_LINE.match(line.strip())
        if not m:
            continue
        x, y = int(m["x"]), int(m["y"])
        out.append(Action("click", x=x, y=y))
        if m["role"] == "list":
            out += [Action("scroll", x=x, y=y, direction=d) for d in ("down", "up")]
    out += [Action("type", text=t) for t in typed_texts(instruction).values()]
    out += [Action("finished", text=v) for v in _VALUE.findall(observation)]
    out += [Action("hotkey", key=k) for k in KEYS]
    return list(dict.fromkeys(format_action(a) for a in out))


def typed_texts(instruction: str | None) -> dict[str, str]:
    """The type actions the instruction offers (each quoted span) -> the text each types."""
    return {format_action(Action("type", text=t)): t for t in _QUOTED.findall(instruction or "")}


def appended(observation: str, text: str) -> bool:
    """Whether typing `text` left it inside a longer field value and in no field whole: typing appends, so it went
    into a field that was not empty (or not selected). A search never needs such a state (the field must be cleared
    again before any quoted value fits it), and at a form's level 3 these states were most of what it tried."""
    values = _VALUE.findall(observation)
    return text not in values and any(text in v for v in values)
