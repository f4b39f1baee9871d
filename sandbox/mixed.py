"""Composed tasks: two families' tasks on one screen, done one after the other ("run File > Export > PDF, then fill in
the form"), for a held-out set that needs two specialists' skills in one episode (docs/training.md, "Specialists and
merging").

A composed family is named `first+second` (e.g. `menu_path+fill_form`). Its task at (level, seed) builds each part
with the part's own builder and seed, puts both parts' widgets (and the one part's menus or pop-ups) on one screen,
and asks for the first goal, then the second (`sandbox.goals.SequenceGoal`, each part judged on its own turn's
events). Only parts that compose cleanly are put together; otherwise `build_composed` raises `NotComposable`, and
the held-out generator tries the next seed:

- no tabs in either part (a widget without a tab next to tabbed content would be on no tab);
- menus or pop-ups in at most one part, and a pop-up that waits for a submit only where no other form submits;
- no widget key in both parts (goals find widgets by key);
- no question to answer (an answer ends the episode, so it could only come last; left out for simplicity).

Composed families are never training tasks (`sandbox.heldout.training_tasks` draws from `FAMILIES` only), so a
composed held-out task can never have been practised.
"""

from __future__ import annotations

import random

from sandbox.families import FAMILIES, Built
from sandbox.goals import AnswerGoal, SequenceGoal
from sandbox.screen import Screen

SEP = "+"


class NotComposable(ValueError):
    """These two parts, at this level and seed, do not share one screen cleanly (see the module docstring)."""


def composed(*families: str) -> str:
    return SEP.join(families)


def parts_of(family: str) -> list[str] | None:
    """The part families of a composed family name, or None when `family` is not a valid composition."""
    parts = family.split(SEP)
    if len(parts) < 2 or any(p not in FAMILIES for p in parts):
        return None
    return parts


def _dialogs(b: Built) -> list:
    return list(b.screen.stack) + list(b.screen.pending)


def build_composed(family: str, level: int, seed: int, width: int, height: int) -> Built:
    parts = parts_of(family)
    if parts is None:
        raise ValueError(f"unknown composed family {family!r}: parts must be families joined by '{SEP}'")
    built = [
        FAMILIES[p](random.Random(f"{family}/{i}/{level}/{seed}"), level, width, height) for i, p in enumerate(parts)
    ]
    if any(b.screen.tabs for b in built):
        raise NotComposable(f"{family} L{level} s{seed}: a part uses tabs")
    if sum(bool(b.screen.menus) for b in built) > 1 or sum(bool(_dialogs(b)) for b in built) > 1:
        raise NotComposable(f"{family} L{level} s{seed}: menus or pop-ups in more than one part")
    if any(isinstance(b.goal, AnswerGoal) for b in built):
        raise NotComposable(f"{family} L{level} s{seed}: a part asks a question")
    keys = [{w.key for w in b.screen.content} for b in built]
    if any(keys[i] & keys[j] for i in range(len(keys)) for j in range(i + 1, len(keys))):
        raise NotComposable(f"{family} L{level} s{seed}: a widget key in two parts")
    waits = any(d.trigger == "submit" for b in built for d in _dialogs(b))
    submits = sum(any(w.effect == "submit" for w in b.screen.content) for b in built)
    if waits and submits > 1:
        raise NotComposable(f"{family} L{level} s{seed}: a confirmation would catch another part's submit")
    first = built[0]
    screen = Screen(width, height, first.screen.title, [w for b in built for w in b.screen.content],
                    menus=next((b.screen.menus for b in built if b.screen.menus), None),
                    dialogs=next((_dialogs(b) for b in built if _dialogs(b)), None))  # fmt: skip
    ins = first.instruction + "".join(f" Then {b.instruction[0].lower()}{b.instruction[1:]}" for b in built[1:])
    return Built(screen, SequenceGoal(parts=[b.goal for b in built]), ins)
