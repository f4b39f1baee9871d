"""Scripted demonstrators for MiniWoB++ tasks: an expert that reads the page, says why, and acts.

Same policy protocol as the sandbox's (sandbox/demonstrators.py): ``reset(task, attempt)``, then
``act(env) -> Decision(thought, action)`` once per step. The expert sees what the text observation lists (the
env's parsed ``elements``) plus the task's fields (MiniWoB's parse of the instruction, e.g. the target
button), decides the next move from the *current* page state (so it also recovers if something did not take),
and acts only through the action grammar, i.e. real pointer and key events. Pages that change on their own
are polled with ``wait()``: the autocomplete menu appears about 300 ms after typing.

`Novice` is the expert with slips: with probability ``p_mistake`` (halved on every retry) a click goes to a
look-alike element of the same kind (another button, link, tab, checkbox, option), which MiniWoB usually
punishes at once; the thought is the one it would say for the element it clicked (it misread).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sandbox.demonstrators import Decision
from sandbox.miniwob.observe import Element
from sandbox.tasks import Task

Move = tuple[str, str]  # (thought, action)


def _click(e: Element) -> str:
    return f"click(point='<point>{e.cx} {e.cy}</point>')"


def _type(text: str) -> str:
    return "type(content='" + text.replace("\\", "\\\\").replace("'", "\\'") + "')"


class _Ctx:
    """What one decision needs: the page's elements, the task fields, memory across steps, phrasing."""

    def __init__(self, env: Any, memory: dict[str, Any], rng: random.Random) -> None:
        self.els: list[Element] = env.elements
        self.fields: dict[str, str] = dict(env.fields)
        self.memory = memory
        self.rng = rng

    def say(self, *options: str, **kw: Any) -> str:
        return self.rng.choice(options).format(**kw)

    def find(self, role: str, name: str | None = None, pred: Callable[[Element], bool] | None = None) -> Element | None:
        for e in self.els:
            if e.role == role and (name is None or e.name == name) and (pred is None or pred(e)):
                return e
        return None

    def all(self, role: str) -> list[Element]:
        return [e for e in self.els if e.role == role]


class StuckError(RuntimeError):
    """The page does not show what the expert needs (a demonstrator bug or an unusual page)."""


def _need(e: Element | None, what: str) -> Element:
    if e is None:
        raise StuckError(f"cannot find {what} on the page")
    return e


# ---- one planner per task -------------------------------------------------------------------------------------


def _click_named(role: str, noun: str) -> Callable[[_Ctx], Move]:
    def plan(c: _Ctx) -> Move:
        t = c.fields["target"]
        e = _need(c.find(role, t), f'{role} "{t}"')
        return c.say(
            "The task wants the {noun} '{t}'. There it is, so I click it.",
            "I need to click the '{t}' {noun}. I can see it; clicking.",
            "'{t}' is the {noun} I'm looking for. Clicking on it.",
            t=t, noun=noun,
        ), _click(e)  # fmt: skip

    return plan


def plan_click_dialog(c: _Ctx) -> Move:
    e = _need(c.find("button", "Close"), "the dialog's close button")
    return c.say(
        "A dialog is open and I'm asked to close it with the 'x'. The x is in its title bar, top right.",
        "To close this dialog I click the little x at the top right of it.",
    ), _click(e)


def plan_click_tab(c: _Ctx) -> Move:
    t = f"Tab #{c.fields['target']}"
    e = _need(c.find("tab", t), t)
    return c.say(
        "I have to open {t}. It's in the row of tabs at the top; clicking it.",
        "{t} is the one I need. Clicking that tab.",
        t=t,
    ), _click(e)


def plan_focus_text(c: _Ctx) -> Move:
    e = _need(c.find("textbox"), "the text box")
    return c.say(
        "I only need to put the cursor in the text box, so I click into it.",
        "Focusing the text field: one click inside it.",
    ), _click(e)


def _submit(c: _Ctx, names: tuple[str, ...] = ("Submit", "submit", "Login")) -> Move:
    b = _need(next((c.find("button", n) for n in names if c.find("button", n)), None), "the submit button")
    return c.say(
        "Everything is filled in as asked. Now I press '{b}'.",
        "That's done; clicking '{b}' to send it.",
        "All set, so I click the '{b}' button.",
        b=b.name,
    ), _click(b)  # fmt: skip


def _value(e: Element) -> str:
    for s in e.states:
        if s.startswith('value="'):
            return s[len('value="') : -1]
    return ""


def _fill(c: _Ctx, box: Element, want: str, label: str) -> Move | None:
    """The next move to make `box` hold `want`, or None when it already does."""
    have = _value(box)
    if have == want.replace('"', "'"):
        return None
    focused = "focused" in box.states
    if not focused:
        c.memory.pop("selected", None)
        return c.say(
            "Next is the {label} field. I click into it first.",
            "I'll click the {label} box to type there.",
            label=label,
        ), _click(box)
    if have and c.memory.get("selected") != box.ref:
        c.memory["selected"] = box.ref
        return c.say(
            "The {label} field already has '{have}' in it. Selecting all of it to replace it.", label=label, have=have
        ), "hotkey(key='ctrl a')"
    c.memory.pop("selected", None)
    return c.say(
        "Typing '{w}' into the {label} field.", "Now I type '{w}'.", "'{w}' goes here; typing it.", w=want, label=label
    ), _type(want)


def _form(pairs: Callable[[_Ctx], list[tuple[Element, str, str]]]) -> Callable[[_Ctx], Move]:
    def plan(c: _Ctx) -> Move:
        for box, want, label in pairs(c):
            m = _fill(c, box, want, label)
            if m is not None:
                return m
        return _submit(c)

    return plan


plan_enter_text = _form(lambda c: [(_need(c.find("textbox"), "the text box"), c.fields["target"], "text")])
plan_enter_password = _form(
    lambda c: [
        (_need(c.find("textbox", "password"), "the password box"), c.fields["target"], "password"),
        (_need(c.find("textbox", "verify"), "the verify box"), c.fields["target"], "verify password"),
    ]
)
plan_login_user = _form(
    lambda c: [
        (_need(c.find("textbox", "username"), "the username box"), c.fields["username"], "username"),
        (_need(c.find("textbox", "password"), "the password box"), c.fields["password"], "password"),
    ]
)


def plan_click_option(c: _Ctx) -> Move:
    t = c.fields["target"]
    r = _need(c.find("radio", t), f'radio "{t}"')
    if "checked" not in r.states:
        return c.say(
            "I'm asked to select '{t}'. Clicking its radio button.", "'{t}' is the option I need; I pick it.", t=t
        ), _click(r)
    return _submit(c)


def plan_click_checkboxes(c: _Ctx) -> Move:
    targets = {v for k, v in c.fields.items() if k.startswith("target")}
    for box in c.all("checkbox"):
        ticked = "checked" in box.states
        if box.name in targets and not ticked:
            return c.say(
                "'{n}' is on my list and not ticked yet. Ticking it.",
                "I need '{n}' selected; clicking its box.",
                n=box.name,
            ), _click(box)
        if box.name not in targets and ticked:
            return c.say("'{n}' is ticked but it isn't one I was asked for. Unticking it.", n=box.name), _click(box)
    if not targets:
        return c.say(
            "Nothing is to be selected, and nothing is ticked. I just click Submit.",
        ), _click(_need(c.find("button", "Submit"), "Submit"))
    return _submit(c)


def plan_choose_list(c: _Ctx) -> Move:
    t = c.fields["target"]
    dd = _need(c.find("dropdown"), "the dropdown")
    if _value(dd) == t:
        return _submit(c)
    if "focused" not in dd.states:
        c.memory.pop("typed", None)
        return c.say(
            "I need '{t}' from the list. I open the dropdown first.",
            "The list is a dropdown showing '{v}'. Clicking it to choose '{t}'.",
            t=t,
            v=_value(dd),
        ), _click(dd)
    if c.memory.get("typed") != t:
        c.memory["typed"] = t
        return c.say(
            "The dropdown is open. Typing '{t}' jumps to that entry.", "I type '{t}' to get to it in the list.", t=t
        ), _type(t)
    c.memory.pop("typed", None)
    return c.say(
        "'{t}' is highlighted now; Enter picks it.", "Pressing Enter to take '{t}'.", t=t
    ), "hotkey(key='enter')"


def plan_use_autocomplete(c: _Ctx) -> Move:
    start, end = c.fields["start"], c.fields.get("end", "")
    box = _need(c.find("textbox"), "the text box")
    have = _value(box)
    ok = have.startswith(start) and have.endswith(end) and len(have) > len(start)
    if ok and not c.find("option"):
        c.memory["waits"] = 0
        return _submit(c)
    if not have:
        if "focused" not in box.states:
            return c.say("I need an item starting with '{s}'. First I click into the text box.", s=start), _click(box)
        return c.say(
            "Typing '{s}' so the suggestions show up.",
            "I type the beginning, '{s}', and let it suggest the rest.",
            s=start,
        ), _type(start)
    pick = next((o for o in c.all("option") if o.name.startswith(start) and o.name.endswith(end)), None)
    if pick is not None:
        c.memory["waits"] = 0
        cond = f" and ends with '{end}'" if end else ""
        return c.say(
            "'{p}' starts with '{s}'{cond}. Clicking that suggestion.",
            "The suggestion '{p}' fits. I pick it.",
            p=pick.name,
            s=start,
            cond=cond,
        ), _click(pick)
    if not c.find("option") and c.memory.get("waits", 0) < 4:
        c.memory["waits"] = c.memory.get("waits", 0) + 1
        return c.say(
            "The suggestions haven't appeared yet. Waiting a moment.", "No list yet; I give it a second."
        ), "wait()"
    if ok:
        return c.say(
            "The box says '{h}', which fits. Closing the suggestions with Esc.", h=have
        ), "hotkey(key='escape')"
    return c.say(
        "The one I want isn't visible in the list. I move down through the suggestions with the arrow key.",
    ), "hotkey(key='down')"


PLANNERS: dict[str, Callable[[_Ctx], Move]] = {
    "click-button": _click_named("button", "button"),
    "click-link": _click_named("link", "link"),
    "click-dialog": plan_click_dialog,
    "click-tab": plan_click_tab,
    "focus-text": plan_focus_text,
    "click-option": plan_click_option,
    "enter-text": plan_enter_text,
    "enter-password": plan_enter_password,
    "login-user": plan_login_user,
    "choose-list": plan_choose_list,
    "use-autocomplete": plan_use_autocomplete,
    "click-checkboxes": plan_click_checkboxes,
}


class Expert:
    """The scripted solver of every task in PLANNERS, narrated. Deterministic phrasing given (task, attempt, seed)."""

    name = "expert"
    pace = 1.0

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.memory: dict[str, Any] = {}
        self.task: Task | None = None
        self.attempt = 0

    def reset(self, task: Task, attempt: int = 0) -> None:
        if task.family not in PLANNERS:
            raise ValueError(
                f"no scripted demonstrator for MiniWoB++ task {task.family!r}; have: {', '.join(PLANNERS)}"
            )
        self.task, self.attempt = task, attempt
        self.rng = random.Random(f"{self.name}/{task.task_id}/{attempt}/{self.seed}")
        self.memory = {}

    def plan(self, env: Any) -> Move:
        assert self.task is not None, "call reset() first"
        return PLANNERS[self.task.family](_Ctx(env, self.memory, self.rng))

    def act(self, env: Any) -> Decision:
        try:
            th, a = self.plan(env)
        except StuckError as e:
            th, a = f"I can't find what I need here ({e}). I'll stop.", "finished(content='')"
        return Decision(th, a, expert_thought=th, expert_action=a)


class Novice(Expert):
    """The expert, but a click sometimes lands on a look-alike of the right element (fatal on most pages)."""

    name = "novice"
    pace = 1.7

    def __init__(self, seed: int = 0, p_mistake: float = 0.25) -> None:
        super().__init__(seed)
        self.p_mistake = p_mistake

    def act(self, env: Any) -> Decision:
        d = super().act(env)
        p = self.p_mistake * 0.5**self.attempt
        if not d.action.startswith("click(") or self.rng.random() >= p:
            return d
        right = next((e for e in env.elements if _click(e) == d.action), None)
        if right is None:
            return d
        others = [e for e in env.elements if e.role == right.role and e.ref != right.ref and e.name]
        if not others:
            return d
        wrong = self.rng.choice(others)
        th = d.thought.replace(right.name, wrong.name) if right.name else d.thought
        fatal = right.role in ("button", "link", "tab", "option")  # a wrong checkbox or radio can still be fixed
        return Decision(
            th, _click(wrong), mistake="lookalike", fatal=fatal, expert_thought=d.thought, expert_action=d.action
        )


class Interactive:
    """Interactive annotation, scripted as in the sandbox: the novice proposes each step, an expert annotator
    accepts a proposal that matches what they would do and overrides the others (saying why). The executed
    trajectory is the expert's; proposals and decisions are kept (sandbox.export.write_annotations)."""

    name = "expert"
    pace = 1.3

    def __init__(self, seed: int = 0, p_mistake: float = 0.25) -> None:
        self.proposer = Novice(seed, p_mistake)

    def reset(self, task: Task, attempt: int = 0) -> None:
        self.proposer.reset(task, attempt)

    def act(self, env: Any) -> Decision:
        p = self.proposer.act(env)  # the novice's move, with the expert's beside it (one plan per step)
        assert p.expert_action is not None and p.expert_thought is not None
        if p.action == p.expert_action:
            return Decision(p.thought, p.action, proposal=(p.thought, p.action), decision="accepted",
                            expert_thought=p.expert_thought, expert_action=p.expert_action)  # fmt: skip
        th = f"No, that is the wrong element. {p.expert_thought}"
        return Decision(th, p.expert_action, proposal=(p.thought, p.action), decision="overridden",
                        expert_thought=p.expert_thought, expert_action=p.expert_action)  # fmt: skip
