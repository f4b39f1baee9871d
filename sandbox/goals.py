"""Goals: what a task wants, checked against the screen's final state, and the expert's next move towards it.

A goal answers three questions: `verdict(screen, answer)` (pass, or fail with a fixed reason code and a
message), `terminal(screen)` (has something irreversible happened: the goal reached, or a wrong commit such
as pressing the wrong button), and `hint(screen, memory)` (the shortest-path expert's next move, computed
from the current state, so the same expert also recovers from a novice's mistakes).

Reason codes (stable, counted by the validators): ok, not_done, not_submitted, wrong_button, wrong_value,
wrong_checkboxes, wrong_command, wrong_item, harmful_choice, no_answer, wrong_answer; the environment adds
unreadable_action, off_screen_action and step_limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sandbox.screen import Element, Screen
from sandbox.widgets import Widget
from schemas.actions import Action
from schemas.records import Verdict


@dataclass(frozen=True)
class Move:
    """One expert move: an action kind, where (an element), what (text/key/direction) and why (for thoughts).

    `why` is a tuple whose first item names the intent ("dismiss", "tab", "scroll_page", "scroll_list", "click",
    "focus", "type", "select_all", "open_menu", "open_submenu", "command", "open_dropdown", "choose", "answer",
    "close_menu", "confirm", "submit", "apply", "open_item", "count"); the rest are names for the sentence.
    """

    kind: str  # click | type | hotkey | scroll | finished
    element: Element | None = None
    text: str | None = None
    key: str | None = None
    direction: str | None = None
    point: tuple[int, int] | None = None
    why: tuple[Any, ...] = ()

    def action(self) -> Action:
        if self.kind == "click":
            assert self.element is not None
            return Action("click", x=self.element.cx, y=self.element.cy)
        if self.kind == "scroll":
            assert self.point is not None
            return Action("scroll", x=self.point[0], y=self.point[1], direction=self.direction)
        if self.kind == "type":
            return Action("type", text=self.text or "")
        if self.kind == "hotkey":
            return Action("hotkey", key=self.key)
        return Action("finished", text=self.text or "")


def fail(reason: str, message: str) -> Verdict:
    return Verdict.fail(reason, message=message)


def normalize_answer(s: str | None) -> str:
    """Answers compare after trimming, lowercasing, collapsing spaces and dropping quotes and a final period."""
    t = " ".join((s or "").strip().strip("'\"").split()).lower().rstrip(".")
    return t


def answers_match(got: str | None, ref: str) -> bool:
    g, r = normalize_answer(got), normalize_answer(ref)
    if g == r:
        return True
    num = re.compile(r"^[$€£]?-?[\d,]*\.?\d+%?$")
    if num.match(g) and num.match(r):
        strip = lambda v: v.strip("$€£%").replace(",", "")
        try:
            return float(strip(g)) == float(strip(r)) and g[:1].isdigit() == r[:1].isdigit()
        except ValueError:
            return False
    return False


# ---- reaching a widget -------------------------------------------------------------------------------------


def page_scroll_point(screen: Screen) -> tuple[int, int]:
    """A point in the content area but outside every widget (the right margin), so a scroll moves the page."""
    return screen.width - 6, screen.content_top + screen.viewport_h // 2


def clear_way(screen: Screen, keep: Widget | None = None) -> Move | None:
    """Close whatever is in the way: a dialog (benign button, or confirm a pending submit), a menu, a dropdown."""
    if screen.stack:
        d = screen.stack[-1]
        if screen.deferred is not None:
            b = next((b for b in d.buttons if b.effect == "confirm"), None)
            if b is not None:
                return Move("click", screen.element_of(b), why=("confirm", d.title, b.name))
        b = next(b for b in d.buttons if b.effect in ("dismiss", "cancel"))
        return Move("click", screen.element_of(b), why=("dismiss", d.title, b.name))
    if screen.open_dropdown is not None and screen.open_dropdown is not keep:
        return Move("hotkey", key="escape", why=("close_dropdown", screen.open_dropdown.name))
    if screen.menu_path:
        return Move("hotkey", key="escape", why=("close_menu",))
    return None


def reach(screen: Screen, w: Widget, row: int | None = None, purpose: str = "") -> Move | None:
    """The move that brings widget `w` (or row `row` of list `w`) into view, or None when it is clickable now."""
    m = clear_way(screen, keep=w)
    if m is not None:
        return m
    if w.tab is not None and w.tab != screen.active_tab:
        return Move("click", screen.element_of(w.tab), why=("tab", w.tab, purpose or w.name))
    if screen.on_panel(w) is None:
        down = w.y + w.h > screen.panel_scroll() + screen.viewport_h
        return Move(
            "scroll", point=page_scroll_point(screen), direction="down" if down else "up",
            why=("scroll_page", "down" if down else "up", purpose or w.name),
        )  # fmt: skip
    if row is not None and not (w.offset <= row < w.offset + w.visible_rows):
        down = row >= w.offset + w.visible_rows
        e = screen.element_of(w, None) or next(x for x in screen.elements() if x.ref is w)
        lst = next((x for x in screen.elements() if x.kind == "list" and x.ref is w), e)
        seen = (w.items[w.offset][0], w.items[min(len(w.items), w.offset + w.visible_rows) - 1][0])
        return Move(
            "scroll", point=(lst.cx, lst.cy), direction="down" if down else "up",
            why=("scroll_list", "down" if down else "up", purpose or w.items[row][0], w.name, seen),
        )  # fmt: skip
    return None


def click(screen: Screen, w: Widget, why: tuple[Any, ...]) -> Move:
    e = screen.element_of(w)
    assert e is not None, f"{w.key} should be visible"
    return Move("click", e, why=why)


# ---- goals -------------------------------------------------------------------------------------------------


@dataclass
class Goal:
    """Base: fails on a harmful dialog choice; subclasses add their own conditions."""

    def harmed(self, screen: Screen) -> Verdict | None:
        for ev in screen.events:
            if ev[0] == "dialog" and ev[2] == "harm":
                return fail("harmful_choice", f'pressed "{ev[3]}" in a pop-up instead of dismissing it')
        return None

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        raise NotImplementedError

    def terminal(self, screen: Screen) -> bool:
        return self.harmed(screen) is not None

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        raise NotImplementedError

    def describe(self) -> str:
        """A stable text of what the goal wants (part of the task fingerprint)."""
        raise NotImplementedError


def _presses(screen: Screen) -> list[str]:
    return [ev[1] for ev in screen.events if ev[0] == "press"]


@dataclass
class OrderedGoal(Goal):
    """Commit these things in order (button presses, menu commands); any other commit is wrong and final."""

    def _state(self, screen: Screen) -> tuple[str, str]:
        raise NotImplementedError

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        h = self.harmed(screen)
        if h:
            return h
        code, msg = self._state(screen)
        return Verdict.ok() if code == "ok" else fail(code, msg)

    def terminal(self, screen: Screen) -> bool:
        return super().terminal(screen) or self._state(screen)[0] != "not_done"


@dataclass
class ButtonGoal(OrderedGoal):
    """Press these buttons in order; pressing any other enabled button is a wrong, irreversible commit."""

    sequence: list[str] = field(default_factory=list)  # widget keys

    def _state(self, screen: Screen) -> tuple[str, str]:
        got = _presses(screen)
        if got == self.sequence:
            return "ok", ""
        for i, k in enumerate(got):
            if i >= len(self.sequence) or k != self.sequence[i]:
                return "wrong_button", f'pressed "{_name(k)}"' + (
                    f' instead of "{_name(self.sequence[i])}"' if i < len(self.sequence) else " after the task was done"
                )
        return "not_done", f'"{_name(self.sequence[len(got)])}" was never pressed'

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        k = self.sequence[len(_presses(screen))]
        w = screen.find(k)
        assert w is not None
        return reach(screen, w) or click(screen, w, ("click", "button", w.name))

    def describe(self) -> str:
        return "press " + " | ".join(self.sequence)


def _name(key: str) -> str:
    return key.split(":", 1)[-1]


@dataclass
class FormGoal(Goal):
    """Give these fields these values (text boxes and dropdowns), then press the submit button."""

    values: dict[str, str] = field(default_factory=dict)  # widget key -> expected value
    submit: str = ""

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        h = self.harmed(screen)
        if h:
            return h
        pressed = _presses(screen)
        if pressed:
            return fail("wrong_button", f'pressed "{_name(pressed[0])}" instead of submitting the form')
        if ("submit", self.submit) not in screen.events:
            return fail("not_submitted", "the form was never submitted")
        for k, v in self.values.items():
            w = screen.find(k)
            got = w.value if w else None
            if got != v:
                return fail("wrong_value", f'field "{_name(k)}" is "{got}", expected "{v}"')
        return Verdict.ok()

    def terminal(self, screen: Screen) -> bool:
        return super().terminal(screen) or bool(_presses(screen)) or ("submit", self.submit) in screen.events

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        assumed = memory.get("assume_done", set())
        for k, v in self.values.items():
            w = screen.find(k)
            assert w is not None
            if w.value == v or k in assumed:
                continue
            m = reach(screen, w, purpose=w.name)
            if m is not None:
                return m
            if w.role == "dropdown":
                if screen.open_dropdown is not w:
                    return click(screen, w, ("open_dropdown", w.name, v))
                e = screen.element_of(w, v)
                assert e is not None
                return Move("click", e, why=("choose", w.name, v))
            if screen.focus is not w:
                return click(screen, w, ("focus", w.name, v))
            cur = w.value or ""
            if screen.select_all or not cur:
                return Move("type", text=v, why=("type", w.name, v))
            if v.startswith(cur):
                return Move("type", text=v[len(cur) :], why=("type_rest", w.name, v, cur))
            return Move("hotkey", key="ctrl a", why=("select_all", w.name, cur))
        w = screen.find(self.submit)
        assert w is not None
        return reach(screen, w) or click(screen, w, ("submit", w.name))

    def describe(self) -> str:
        return "form " + " | ".join(f"{k}={v}" for k, v in self.values.items()) + f" submit {self.submit}"


@dataclass
class CheckGoal(Goal):
    """Set exactly these checkboxes (key -> ticked), then press the apply button."""

    desired: dict[str, bool] = field(default_factory=dict)
    apply: str = ""

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        h = self.harmed(screen)
        if h:
            return h
        pressed = _presses(screen)
        if pressed:
            return fail("wrong_button", f'pressed "{_name(pressed[0])}" instead of applying')
        if ("apply", self.apply) not in screen.events:
            return fail("not_done", f'"{_name(self.apply)}" was never pressed')
        wrong = [_name(k) for k, v in self.desired.items() if bool((screen.find(k) or Widget("x", "x")).checked) != v]
        if wrong:
            return fail("wrong_checkboxes", "wrong state: " + ", ".join(wrong))
        return Verdict.ok()

    def terminal(self, screen: Screen) -> bool:
        return super().terminal(screen) or bool(_presses(screen)) or ("apply", self.apply) in screen.events

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        for k, v in self.desired.items():
            w = screen.find(k)
            assert w is not None
            if bool(w.checked) == v or not w.enabled:
                continue
            return reach(screen, w, purpose=w.name) or click(screen, w, ("tick" if v else "untick", w.name))
        w = screen.find(self.apply)
        assert w is not None
        return reach(screen, w) or click(screen, w, ("apply", w.name))

    def describe(self) -> str:
        return "check " + " | ".join(f"{k}={int(v)}" for k, v in self.desired.items()) + f" apply {self.apply}"


@dataclass
class MenuGoal(OrderedGoal):
    """Run these menu commands ("File > Export > PDF") in order; any other command is a wrong commit."""

    commands: list[list[str]] = field(default_factory=list)

    def _state(self, screen: Screen) -> tuple[str, str]:
        want = [" > ".join(c) for c in self.commands]
        got = [ev[1] for ev in screen.events if ev[0] == "command"]
        if got == want:
            return "ok", ""
        for i, c in enumerate(got):
            if i >= len(want) or c != want[i]:
                return "wrong_command", f"ran {c}" + (f" instead of {want[i]}" if i < len(want) else " after the task")
        return "not_done", f"{want[len(got)]} was never run"

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        n = sum(1 for ev in screen.events if ev[0] == "command")
        path = self.commands[n]
        if screen.stack or screen.open_dropdown is not None:
            m = clear_way(screen)
            assert m is not None
            return m
        # indices of the path in the menu tree
        idx: list[int] = []
        nodes = screen.menus
        for name in path:
            i = next(i for i, nd in enumerate(nodes) if nd.name == name and nd.enabled)
            idx.append(i)
            nodes = nodes[i].children
        open_ = screen.menu_path
        if open_ and open_ != idx[: len(open_)]:
            return Move("hotkey", key="escape", why=("close_menu",))
        if not open_:
            e = next(e for e in screen.elements() if e.kind == "menu" and e.extra == idx[0])
            return Move("click", e, why=("open_menu", path[0], " > ".join(path)))
        depth = len(open_)
        e = next(e for e in screen.elements() if e.kind == "menuitem" and e.extra == idx[: depth + 1])
        if depth + 1 < len(idx):
            return Move("click", e, why=("open_submenu", path[depth], " > ".join(path)))
        return Move("click", e, why=("command", " > ".join(path), path[-1]))

    def describe(self) -> str:
        return "menu " + " | ".join(" > ".join(c) for c in self.commands)


@dataclass
class OpenGoal(Goal):
    """Open (click) the item with this name in this list; opening another item is a wrong commit."""

    list_key: str = ""
    item: str = ""

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        h = self.harmed(screen)
        if h:
            return h
        opened = [ev[2] for ev in screen.events if ev[0] == "open"]
        if not opened:
            return fail("not_done", f'"{self.item}" was never opened')
        if opened[0] != self.item:
            return fail("wrong_item", f'opened "{opened[0]}" instead of "{self.item}"')
        return Verdict.ok()

    def terminal(self, screen: Screen) -> bool:
        return super().terminal(screen) or any(ev[0] == "open" for ev in screen.events)

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        lw = screen.find(self.list_key)
        assert lw is not None
        row = next(i for i, (n, _) in enumerate(lw.items) if n == self.item)
        m = reach(screen, lw, row=row, purpose=self.item)
        if m is not None:
            return m
        e = screen.element_of(lw, row)
        assert e is not None
        return Move("click", e, why=("open_item", self.item))

    def describe(self) -> str:
        return f"open {self.list_key} {self.item}"


@dataclass
class AnswerGoal(Goal):
    """Answer with finished(content=...). The expert only answers what it has seen: it first brings the fact
    (a text widget, or a row of a list) into view; for a count it scrolls the whole list, counting as it goes."""

    reference: str = ""
    source: str = ""  # widget key holding the fact (a text widget or a list)
    row: int | None = None  # the list row holding the fact
    count_value: str | None = None  # count the list rows whose value is this

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        h = self.harmed(screen)
        if h:
            return h
        if answer is None:
            return fail("no_answer", "the episode ended without finished(content=...)")
        if not answers_match(answer, self.reference):
            return fail("wrong_answer", f'answered "{answer}", expected "{self.reference}"')
        return Verdict.ok()

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        w = screen.find(self.source)
        assert w is not None
        if self.count_value is None:
            m = reach(screen, w, row=self.row, purpose=w.name if self.row is None else w.items[self.row][0])
            if m is not None:
                return m
            e = screen.element_of(w, self.row) if self.row is not None else screen.element_of(w)
            label = w.name if self.row is None else w.items[self.row][0]
            return Move("finished", e, text=self.reference, why=("answer", label, self.reference))
        m = reach(screen, w, purpose=w.name)
        if m is not None:
            return m
        seen: set[int] = memory.setdefault("seen_rows", set())
        new = [i for i in range(w.offset, min(len(w.items), w.offset + w.visible_rows)) if i not in seen]
        seen.update(new)
        so_far = sum(1 for i in seen if w.items[i][1] == self.count_value)
        if len(seen) >= len(w.items):
            return Move("finished", text=str(so_far), why=("answer_count", self.count_value, str(so_far)))
        lst = next(x for x in screen.elements() if x.kind == "list" and x.ref is w)
        if w.offset > 0 and 0 not in seen:
            return Move("scroll", point=(lst.cx, lst.cy), direction="up", why=("count_top", w.name))
        return Move(
            "scroll", point=(lst.cx, lst.cy), direction="down", why=("count", self.count_value, so_far, len(new))
        )

    def describe(self) -> str:
        return f"answer {self.reference} from {self.source} row {self.row} count {self.count_value}"


# ---- goals done one after another (composed tasks, sandbox/mixed.py) --------------------------------------


class _Since:
    """The screen as one part of a sequence sees it: the screen itself, except that `events` holds only the events
    from `start` to `end` (the part's turn), so a part's goal never counts another part's presses or commands."""

    def __init__(self, screen: Screen, start: int, end: int | None = None) -> None:
        self._screen, self._start, self._end = screen, start, end

    @property
    def events(self) -> list[tuple[str, ...]]:
        return self._screen.events[self._start : self._end]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._screen, name)


@dataclass
class SequenceGoal(Goal):
    """Reach these goals in order, each judged only on the events of its own turn: a part's turn ends when that part
    is terminal (done, or failed for good), and the next part's begins. A later part's commit before its turn (the
    form submitted before the menu command ran) ends the episode, failing the part still waiting."""

    parts: list[Goal] = field(default_factory=list)

    def _turns(self, screen: Screen) -> list[tuple[int, int | None]]:
        """(start, end) of each part's turn that has begun; the last one's end is None while it is still open."""
        out: list[tuple[int, int | None]] = []
        start, n = 0, len(screen.events)
        for g in self.parts:
            end = next((e for e in range(start + 1, n + 1) if g.terminal(_Since(screen, start, e))), None)  # type: ignore[arg-type]
            out.append((start, end))
            if end is None or not g.verdict(_Since(screen, start, end), None).passed:  # type: ignore[arg-type]
                break
            start = end
        return out

    def verdict(self, screen: Screen, answer: str | None) -> Verdict:
        turns = self._turns(screen)
        for g, (a, b) in zip(self.parts, turns):
            v = g.verdict(_Since(screen, a, b), answer)  # type: ignore[arg-type]
            if not v.passed:
                return v
        if len(turns) < len(self.parts):  # an open part whose state already passes, before the next part began
            return fail("not_done", "the task's later part was never begun")
        return Verdict.ok()

    def terminal(self, screen: Screen) -> bool:
        turns = self._turns(screen)
        a, b = turns[-1]
        if b is not None:  # the last part begun is over: all done, or one failed for good
            return True
        now = _Since(screen, a)
        return any(g.terminal(now) for g in self.parts[len(turns) :])  # type: ignore[arg-type]

    def hint(self, screen: Screen, memory: dict[str, Any]) -> Move:
        turns = self._turns(screen)
        a, _ = turns[-1]
        return self.parts[len(turns) - 1].hint(_Since(screen, a), memory)  # type: ignore[arg-type]

    def describe(self) -> str:
        return " then ".join(g.describe() for g in self.parts)
