"""Scripted demonstrators: an expert (shortest path) and a novice (explores, errs, recovers), both thinking aloud.

Both are policies over the Env API: `reset(task, attempt)`, then `act(env) -> Decision` once per step. The
expert follows the task goal's `hint` (the shortest path from the current state) and says why before every
action. The novice asks the same expert for the right move, but with a probability that grows with the level
and shrinks with every retry (`p_mistake`) does something else: a near miss, a look-alike, a typo, the wrong
tab or menu, the wrong scroll direction, clicking through a pop-up. Most mistakes are recoverable, and the
next thought says what went wrong before fixing it; some are irreversible (pressing the wrong button, a
harmful pop-up choice, an unnoticed typo, a misread answer) and fail the attempt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sandbox.env import Env
from sandbox.goals import Move
from sandbox.screen import Element
from sandbox.tasks import Task
from schemas.actions import Action, format_action


@dataclass(frozen=True)
class Decision:
    """What a demonstrator does at one step: the thought said before the action, and the action string."""

    thought: str
    action: str
    mistake: str | None = None  # code of a mistake made by this action (novice)
    fatal: bool = False  # the mistake cannot be recovered from
    recovers: str | None = None  # the earlier mistake this step's thought describes and fixes
    expert_thought: str | None = None  # what the expert would have thought and done here
    expert_action: str | None = None
    proposal: tuple[str, str] | None = None  # interactive annotation: the model's (thought, action) proposal
    decision: str | None = None  # interactive annotation: accepted | overridden


# ---- thoughts --------------------------------------------------------------------------------------------------

_T: dict[str, tuple[str, ...]] = {
    "dismiss": (
        "A '{0}' pop-up is covering the window. I'll close it with '{1}'.",
        "First I have to get rid of the '{0}' dialog, so I click '{1}'.",
        "The '{0}' dialog is in the way; '{1}' dismisses it without changing anything.",
    ),
    "confirm": ("It asks me to confirm. I click '{1}'.", "A confirmation dialog: '{1}' sends it."),
    "close_dropdown": ("The {0} dropdown is still open; Esc closes it.",),
    "close_menu": ("That menu is open but I don't need it; I press Esc to close it.",),
    "tab": (
        "'{1}' should be on the {0} tab, so I switch to it.",
        "I need the {0} tab for '{1}'. Clicking the tab.",
    ),
    "scroll_page": (
        "I can't see '{1}' yet; the page continues {0}. Scrolling {0}.",
        "'{1}' must be further {0} on the page. Let me scroll {0}.",
    ),
    "scroll_list": (
        "The list is sorted by name and shows '{3[0]}' to '{3[1]}'; '{1}' comes {4}, so I scroll {0}.",
        "'{1}' isn't among the visible rows ('{3[0]}' to '{3[1]}'). Scrolling the list {0}.",
    ),
    "click": (
        "There is the '{1}' button. Clicking it.",
        "I can see '{1}'; I'll press it.",
        "'{1}' is right there. Click.",
    ),
    "focus": ("Now the {0} field: I click into it to enter '{1}'.", "Next is {0}; clicking the box first."),
    "type": ("Typing '{1}'.", "I type '{1}' into {0}."),
    "type_rest": ("{0} already starts with '{2}'; I just add the rest.",),
    "select_all": ("{0} already says '{1}', which is wrong. I select all of it to replace it.",),
    "open_dropdown": ("{0} has to be '{1}'. Opening the dropdown.", "Now {0}: I open the list of choices."),
    "choose": ("There's '{1}' in the list. Picking it.", "I choose '{1}'."),
    "tick": ("'{0}' should be ticked. Ticking it.", "'{0}' is off; I turn it on."),
    "untick": ("'{0}' is ticked but shouldn't be. Unticking it.", "I turn '{0}' off."),
    "apply": ("All the boxes look right now. Clicking '{0}'.", "That's the set I was asked for; '{0}' saves it."),
    "submit": ("Every field is filled in. Clicking '{0}'.", "The form looks complete, so I press '{0}'."),
    "open_menu": ("The command is {1}, so I start with the {0} menu.", "{1}: first the {0} menu."),
    "open_submenu": ("Now I open '{0}'.", "Next step along {1}: '{0}'."),
    "command": ("And finally the '{1}' item.", "There it is: '{1}'. Clicking it to run {0}."),
    "open_item": ("There is '{0}'. Opening it.", "Found '{0}' in the list; I click it."),
    "answer": ("The {0} reads {1}. That's the answer.", "I can read it off the screen: {0} is {1}."),
    "answer_count": (
        "I've seen every row now: {1} orders are '{0}'.",
        "That was the whole list. {1} of them are '{0}'.",
    ),
    "count": (
        "So far I count {1} '{0}' orders. Scrolling down for more.",
        "{1} '{0}' orders up to here; the list goes on.",
    ),
    "count_top": ("The list isn't at the top. I scroll up first so that I count every row.",),
}

_RECOVER: dict[str, tuple[str, ...]] = {
    "near_miss": ("My click at {0} hit nothing; I missed '{1}'. Trying again, more carefully.",
                  "Hmm, nothing happened: the click at {0} missed '{1}'."),
    "wrong_checkbox": ("Oops, I ticked '{0}' instead of '{1}'. Unticking '{0}' again.",
                       "Wait, that changed '{0}', which I wasn't supposed to touch. Undoing it."),
    "wrong_focus": ("Wait, I clicked into '{0}' instead of '{1}'.",),
    "typo": ("I made a typo: the field says '{0}' but it should be '{1}'. Let me fix it.",),
    "wrong_option": ("Oops, I picked '{0}' in {1}; it should be '{2}'.",),
    "wrong_menu": ("Wrong menu: that's {0}, not {1}. Closing it.",),
    "wrong_submenu": ("That opened '{0}', which is not on the way to {1}. Backing out.",),
    "wrong_tab": ("This is the {0} tab and '{1}' isn't here. Wrong tab.",),
    "wrong_scroll": ("I scrolled {0}, the wrong way: '{1}' is the other direction.",),
    "through_dialog": ("The click didn't go through: the '{0}' pop-up is blocking the window.",),
    "cancel_confirm": ("Oops, I cancelled the confirmation instead of confirming. I'll submit again.",),
    "disabled_lookalike": ("'{0}' is greyed out, and it isn't the button I need anyway; I want '{1}'.",),
}  # fmt: skip


def _say(rng: random.Random, table: dict[str, tuple[str, ...]], code: str, args: tuple[Any, ...]) -> str:
    return rng.choice(table[code]).format(*args)


def expert_thought(rng: random.Random, m: Move) -> str:
    code, args = m.why[0], m.why[1:]
    if code == "scroll_list":
        args = (*args, "later" if args[0] == "down" else "earlier")
    if code == "count":
        args = (args[0], args[1])
    return _say(rng, _T, code, args)


class Expert:
    """The shortest path, narrated. Deterministic given (task, attempt, seed)."""

    name = "expert"
    pace = 1.0  # thinking/acting speed multiplier for timestamps

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.memory: dict[str, Any] = {}

    def reset(self, task: Task, attempt: int = 0) -> None:
        self.rng = random.Random(f"{self.name}/{task.task_id}/{attempt}/{self.seed}")
        self.memory = {}

    def move(self, env: Env) -> Move:
        return env.goal.hint(env.screen, self.memory)

    def act(self, env: Env) -> Decision:
        m = self.move(env)
        th, a = expert_thought(self.rng, m), format_action(m.action())
        return Decision(th, a, expert_thought=th, expert_action=a)


def p_mistake(level: int, attempt: int) -> float:
    """The novice's chance of a mistake per step: higher on harder levels, lower on every retry."""
    return min(0.6, 0.10 + 0.04 * level) * 0.5**attempt


class Novice(Expert):
    """Explores and errs; recovers from most mistakes and says so; fails at a rate that falls with retries."""

    name = "novice"
    pace = 1.7
    fatal_share = 0.4  # of mistakes, when an irreversible one is available

    def reset(self, task: Task, attempt: int = 0) -> None:
        super().reset(task, attempt)
        self.p = p_mistake(task.level, attempt)
        self.pending: tuple[str, tuple[Any, ...]] | None = None  # a mistake to narrate next step
        self.undo: Element | None = None

    def forget(self) -> None:
        """Called when the novice's proposal was overridden (interactive annotation): nothing to recover from."""
        self.pending, self.undo = None, None
        self.memory.pop("assume_done", None)

    def act(self, env: Env) -> Decision:
        m = self.move(env)
        exp_th, exp_a = expert_thought(self.rng, m), format_action(m.action())
        prefix, recovers = "", None
        if self.pending is not None:
            code, args = self.pending
            prefix, recovers = _say(self.rng, _RECOVER, code, args) + " ", code
            self.pending = None
        if self.undo is not None:
            e, self.undo = self.undo, None
            if env.screen.element_of(e.ref) is not None and not env.screen.stack:
                a = format_action(Action("click", x=e.cx, y=e.cy))
                return Decision(prefix.strip(), a, recovers=recovers, expert_thought=exp_th, expert_action=exp_a)
        if recovers is None and self.rng.random() < self.p:
            wrong = self._mistake(env, m, fatal=self.rng.random() < self.fatal_share)
            if wrong is not None:
                th, a, code, fatal = wrong
                return Decision(th, a, mistake=code, fatal=fatal, expert_thought=exp_th, expert_action=exp_a)
        return Decision(prefix + exp_th, exp_a, recovers=recovers, expert_thought=exp_th, expert_action=exp_a)

    # ---- mistakes ----------------------------------------------------------------------------------------------

    def _mistake(self, env: Env, m: Move, fatal: bool) -> tuple[str, str, str, bool] | None:
        """(thought, action, mistake code, fatal) or None when no mistake fits this move."""
        s, rng, code = env.screen, self.rng, m.why[0]
        els = s.elements()
        target = m.element

        def click(e: Element) -> str:
            return format_action(Action("click", x=e.cx, y=e.cy))

        def alike(kind: str, role: str, enabled: bool | None = None) -> list[Element]:
            out = [e for e in els if e.kind == kind and e.role == role and e is not target and not e.blocked]
            if enabled is not None:
                out = [e for e in out if getattr(e.ref, "enabled", True) == enabled]
            if target is not None:
                words = set(target.name.lower().split())
                close = [e for e in out if words & set(e.name.lower().split())]
                out = close or out
            return out

        def near_miss() -> tuple[str, str, str, bool] | None:
            if target is None or s.stack:
                return None
            for px, py in ((target.x + target.w + 5, target.cy), (target.cx, target.y - 5), (target.x - 6, target.cy)):
                if (
                    0 <= px < s.width
                    and 0 <= py < s.height
                    and s.hit(px, py) is None
                    and not s.menu_path
                    and s.open_dropdown is None
                ):
                    self.pending = ("near_miss", (f"({px}, {py})", target.name))
                    th = expert_thought(rng, m)
                    return th, format_action(Action("click", x=px, y=py)), "near_miss", False
            return None

        if code in ("click", "submit", "apply", "tick", "untick"):
            if fatal and code in ("click", "submit", "apply"):
                wrong = alike("content", "button", enabled=True)
                if wrong:
                    e = rng.choice(wrong)
                    return f"That must be it: '{e.name}'.", click(e), "wrong_button", True
            if fatal and code in ("tick", "untick"):
                btn = next((e for e in els if e.kind == "content" and getattr(e.ref, "effect", "") == "apply"), None)
                if btn is not None:
                    return f"I think that's all of them. Clicking '{btn.name}'.", click(btn), "premature_apply", True
            if code in ("tick", "untick"):
                wrong = alike("content", "checkbox", enabled=True)
                if wrong and rng.random() < 0.6:
                    e = rng.choice(wrong)
                    self.undo, self.pending = e, ("wrong_checkbox", (e.name, target.name if target else ""))
                    return expert_thought(rng, m), click(e), "wrong_checkbox", False
            dis = alike("content", "button", enabled=False) if code == "click" else []
            if dis and rng.random() < 0.5:
                e = rng.choice(dis)
                self.pending = ("disabled_lookalike", (e.name, target.name if target else ""))
                return f"I'll press '{e.name}'.", click(e), "disabled_lookalike", False
            return near_miss()
        if code == "focus":
            wrong = alike("content", "textbox", enabled=True)
            if wrong and rng.random() < 0.6:
                e = rng.choice(wrong)
                self.pending = ("wrong_focus", (e.name, m.why[1]))
                return f"Now I click into the {m.why[1]} field.", click(e), "wrong_focus", False
            return near_miss()
        if code in ("type", "type_rest"):
            value = m.why[2]
            typed = _typo(rng, m.text or "")
            if typed == (m.text or ""):
                return None
            w = env.screen.focus
            if fatal and w is not None:
                self.memory.setdefault("assume_done", set()).add(w.key)
                return f"Typing '{value}'.", format_action(Action("type", text=typed)), "unnoticed_typo", True
            whole = (w.value or "") + typed if w is not None and not s.select_all else typed
            self.pending = ("typo", (whole, value))
            return f"Typing '{value}'.", format_action(Action("type", text=typed)), "typo", False
        if code == "choose":
            wrong = alike("option", "option")
            if wrong:
                e = rng.choice(wrong)
                self.pending = ("wrong_option", (e.name, m.why[1], m.why[2]))
                return f"I choose '{m.why[2]}'.", click(e), "wrong_option", False
            return None
        if code == "open_menu":
            wrong = alike("menu", "menu")
            if wrong:
                e = rng.choice(wrong)
                self.pending = ("wrong_menu", (e.name, m.why[1].split(" > ")[0]))
                return f"I think {m.why[2]} is under {e.name}.", click(e), "wrong_menu", False
            return None
        if code in ("open_submenu", "command"):
            wrong = [e for e in alike("menuitem", "menuitem") if e.x == (target.x if target else -1) and e.ref.enabled]  # type: ignore[attr-defined]
            leaves = [e for e in wrong if not e.ref.children]  # type: ignore[attr-defined]
            subs = [e for e in wrong if e.ref.children]  # type: ignore[attr-defined]
            if fatal and leaves:
                e = rng.choice(leaves)
                return f"'{e.name}' looks right.", click(e), "wrong_command", True
            if subs:
                e = rng.choice(subs)
                path = m.why[2] if code == "open_submenu" else m.why[1]
                self.pending = ("wrong_submenu", (e.name, path))
                return f"I'll try '{e.name}'.", click(e), "wrong_submenu", False
            return near_miss()
        if code == "tab":
            wrong = alike("tab", "tab")
            wrong = [e for e in wrong if e.ref != s.active_tab]
            if wrong:
                e = rng.choice(wrong)
                self.pending = ("wrong_tab", (e.name, m.why[2]))
                return f"'{m.why[2]}' is probably on the {e.name} tab.", click(e), "wrong_tab", False
            return None
        if code in ("scroll_page", "scroll_list", "count"):
            if code == "count":
                return None
            d = m.direction
            other = {"down": "up", "up": "down"}.get(d or "", "down")
            self.pending = ("wrong_scroll", (other, m.why[2]))
            a = format_action(Action("scroll", x=m.point[0], y=m.point[1], direction=other))  # type: ignore[index]
            return f"Scrolling {other} to look for '{m.why[2]}'.", a, "wrong_scroll", False
        if code == "open_item":
            if fatal and target is not None:
                lw, row = target.ref, target.extra
                nb = [e for e in els if e.kind == "listitem" and e.ref is lw and abs(e.extra - row) == 1]  # type: ignore[operator]
                if nb:
                    e = rng.choice(nb)
                    return f"There it is, '{e.name}'. Opening it.", click(e), "wrong_item", True
            return None
        if code == "dismiss":
            d = s.stack[-1]
            harm = [b for b in d.buttons if b.effect == "harm"]
            if fatal and harm:
                b = harm[0]
                e = s.element_of(b)
                if e is not None:
                    return f"'{b.name}' sounds fine. Clicking it.", click(e), "harmful_choice", True
            behind = [e for e in els if e.blocked and e.kind in ("content", "tab")]
            if behind:
                e = rng.choice(behind)
                self.pending = ("through_dialog", (d.title,))
                return f"I'll just click '{e.name}'.", click(e), "through_dialog", False
            return None
        if code == "confirm":
            d = s.stack[-1]
            c = next((b for b in d.buttons if b.effect == "cancel"), None)
            e = s.element_of(c) if c is not None else None
            if e is not None:
                self.pending = ("cancel_confirm", ())
                return "Another dialog. I'll close it.", click(e), "cancel_confirm", False
            return None
        if code == "answer" and fatal:
            vals = [_value_of(e) for e in els if e.kind in ("content", "listitem") and e is not m.element]
            vals = [v for v in vals if v and v != m.text]
            if vals:
                v = rng.choice(vals)
                return f"The answer should be {v}.", format_action(Action("finished", text=v)), "misread", True
            return None
        if code == "answer_count" and fatal:
            n = int(m.text or "0")
            v = str(n + rng.choice((-1, 1)) if n else 1)
            return f"I counted {v}.", format_action(Action("finished", text=v)), "miscount", True
        return None


def same_move(screen: Any, proposed: str, wanted: str) -> bool:
    """Would `proposed` do what `wanted` does on this screen? The same kind, a point on the same element (any
    pixel of it), the same text, keys and scroll direction. How an annotator judges a proposal."""
    from schemas.actions import ActionError, parse_action

    try:
        a, b = parse_action(proposed), parse_action(wanted)
    except ActionError:
        return False
    if (a.kind, a.text, a.key, a.direction) != (b.kind, b.text, b.key, b.direction):
        return False
    if b.point is None:
        return a.point is None
    if a.point is None:
        return False
    ea, eb = screen.hit(*a.point), screen.hit(*b.point)
    if eb is None:  # the expert points at no element (a scroll over the page): the same point only
        return a.point == b.point
    return ea is not None and ea.ref is eb.ref and ea.kind == eb.kind and ea.name == eb.name


class Interactive:
    """Interactive annotation, scripted: a weak model (the novice) proposes each step, an expert annotator
    accepts the proposal when it is what they would do and otherwise overrides it with their own thought
    and action. The executed trajectory is the expert's; the proposals and decisions are kept."""

    name = "expert"
    pace = 1.3

    def __init__(self, seed: int = 0, model_version: str = "sandbox-novice") -> None:
        self.proposer, self.annotator = Novice(seed), Expert(seed)
        self.model_version = model_version

    def reset(self, task: Task, attempt: int = 0) -> None:
        self.proposer.reset(task, attempt)
        self.annotator.reset(task, attempt)
        self.proposer.memory = self.annotator.memory  # one view of what has been seen (counting tasks)

    def act(self, env: Env) -> Decision:
        p = self.proposer.act(env)
        assert p.expert_action is not None and p.expert_thought is not None
        if p.action == p.expert_action:
            return Decision(p.thought, p.action, proposal=(p.thought, p.action), decision="accepted",
                            expert_thought=p.expert_thought, expert_action=p.expert_action)  # fmt: skip
        self.proposer.forget()
        th = p.expert_thought
        if p.mistake:
            th = f"No, {_OVERRIDE.get(p.mistake, 'that is not the right move')}. {th}"
        return Decision(th, p.expert_action, proposal=(p.thought, p.action), decision="overridden",
                        expert_thought=p.expert_thought, expert_action=p.expert_action)  # fmt: skip


_OVERRIDE = {
    "near_miss": "that click would miss the target",
    "wrong_button": "that is the wrong button",
    "premature_apply": "not all boxes are set yet",
    "wrong_checkbox": "that is the wrong checkbox",
    "disabled_lookalike": "that button is disabled",
    "wrong_focus": "that is the wrong field",
    "typo": "that would type a typo",
    "unnoticed_typo": "that would type a typo",
    "wrong_option": "that is the wrong option",
    "wrong_menu": "that is the wrong menu",
    "wrong_submenu": "that submenu is the wrong way",
    "wrong_command": "that runs the wrong command",
    "wrong_tab": "that is the wrong tab",
    "wrong_scroll": "that scrolls the wrong way",
    "wrong_item": "that opens the wrong item",
    "harmful_choice": "that button would do something we don't want",
    "through_dialog": "the pop-up blocks that click",
    "cancel_confirm": "that cancels the submission",
    "misread": "that value is misread",
    "miscount": "that count is off",
}


def _value_of(e: Element) -> str | None:
    if e.kind == "listitem":
        return e.ref.items[e.extra][1]  # type: ignore[attr-defined,index]
    return getattr(e.ref, "value", None) if getattr(e.ref, "role", "") == "text" else None


def _typo(rng: random.Random, s: str) -> str:
    """A realistic slip: a dropped, doubled or swapped character."""
    if len(s) < 2:
        return s + s[-1:] if s else s
    i = rng.randrange(len(s) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        return s[:i] + s[i + 1 :]
    if kind == 1:
        return s[:i] + s[i] + s[i:]
    t = s[:i] + s[i + 1] + s[i] + s[i + 2 :]
    return t if t != s else s[:i] + s[i + 1 :]


__all__ = ["Decision", "Expert", "Interactive", "Novice", "expert_thought", "p_mistake"]
