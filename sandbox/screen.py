"""The screen: layout, state and dynamics of one sandbox window, and its compact text form.

A screen is a window with a title bar, an optional menu bar, optional tabs, a scrolling content panel laid out
on a two-column grid (buttons, text boxes, checkboxes, dropdowns, read-only texts, scrolling lists), overlays
(open menus, dropdown options) and a stack of modal dialogs. Actions arrive already parsed (schemas.actions);
each returns a short effect message and may append an event to `events`, which the task's goal reads.

`elements()` lists what is visible, in z-order, as the single source for the text observation, hit-testing
and rendering, so what a policy reads is exactly what a click can hit.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.widgets import (
    BAR_H,
    LIST_ROW_H,
    MENU_ROW_H,
    ROW_H,
    TAB_H,
    WIDGET_H,
    Dialog,
    MenuNode,
    Rect,
    Widget,
    text_w,
)
from schemas.actions import Action

MARGIN = 16
LABEL_W = 104


@dataclass(slots=True, eq=False)
class Element:
    """A visible element in screen coordinates; `ref` is the widget, menu node, dialog or list it stands for."""

    kind: str  # content | tab | menu | menuitem | option | dialog | dialogtext | dialogbtn | list | listitem
    role: str
    name: str
    x: int
    y: int
    w: int
    h: int
    ref: object = None
    extra: object = None  # menuitem: its path; option: its text; listitem: its row index
    blocked: bool = False

    @property
    def cx(self) -> int:
        return self.x + self.w // 2

    @property
    def cy(self) -> int:
        return self.y + self.h // 2

    def contains(self, px: int, py: int) -> bool:
        return self.x <= px < self.x + self.w and self.y <= py < self.y + self.h


def _q(s: str) -> str:
    return s.replace('"', "'").replace("\n", " ")


class Screen:
    """State and dynamics of one window. Build it, then call `click/type/hotkey/scroll` with parsed actions."""

    def __init__(
        self,
        width: int,
        height: int,
        title: str,
        content: list[Widget],
        tabs: list[str] | None = None,
        menus: list[MenuNode] | None = None,
        dialogs: list[Dialog] | None = None,
        status: str = "Ready",
    ) -> None:
        self.width, self.height, self.title, self.status = width, height, title, status
        self.content = content
        self.tabs = list(tabs or [])
        self.menus = list(menus or [])
        self.active_tab: str | None = self.tabs[0] if self.tabs else None
        self.scroll: dict[str | None, int] = {}
        self.menu_path: list[int] = []
        self.open_dropdown: Widget | None = None
        self.focus: Widget | None = None
        self.select_all = False
        self.events: list[tuple[str, ...]] = []
        self.pending: list[Dialog] = list(dialogs or [])
        self.stack: list[Dialog] = []
        self.deferred: Widget | None = None
        self.version = 0
        self._cache: tuple[int, list[Element]] | None = None
        self._text_cache: tuple[int, str] | None = None
        self._layout()
        self._show("start")

    # ---- layout -------------------------------------------------------------------------------------------

    def _layout(self) -> None:
        W, H = self.width, self.height
        y = BAR_H
        self.menubar_y = y if self.menus else -1
        if self.menus:
            x = 8
            self.menu_rects: list[Rect] = []
            for m in self.menus:
                w = text_w(m.name) + 16
                self.menu_rects.append(Rect(x, y, w, BAR_H))
                x += w
            y += BAR_H
        self.tab_rects: list[Rect] = []
        if self.tabs:
            x = 8
            for t in self.tabs:
                w = text_w(t) + 24
                self.tab_rects.append(Rect(x, y + 2, w, TAB_H - 2))
                x += w + 2
            y += TAB_H
        self.content_top = y + 6
        self.content_bottom = H - BAR_H
        self.viewport_h = self.content_bottom - self.content_top
        col_w = (W - 3 * MARGIN) // 2
        self.panel_h: dict[str | None, int] = {}
        for tab in self.tabs or [None]:
            r = c = 0
            for w in (w for w in self.content if w.tab == tab):
                if w.span == 2:
                    if c:
                        r, c = r + 1, 0
                    w.x, w.y, w.w = MARGIN, r * ROW_H + 4, W - 2 * MARGIN
                    w.h = w.visible_rows * LIST_ROW_H
                    w.rows = -(-(w.h + 8) // ROW_H)
                    r += w.rows
                    continue
                cx = MARGIN + c * (col_w + MARGIN)
                w.y, w.h = r * ROW_H + (ROW_H - WIDGET_H) // 2, WIDGET_H
                if w.role in ("textbox", "dropdown"):
                    w.label_w = min(LABEL_W, col_w // 2)
                    w.x, w.w = cx + w.label_w, col_w - w.label_w
                elif w.role == "checkbox":
                    w.x, w.w = cx, min(24 + text_w(w.name), col_w)
                elif w.role == "text":
                    w.x, w.w = cx, min(text_w(f"{w.name}: {w.value}") + 4, col_w)
                else:
                    w.x, w.w = cx, min(text_w(w.name) + 24, col_w)
                c += 1
                if c == 2:
                    r, c = r + 1, 0
            self.panel_h[tab] = (r + (1 if c else 0)) * ROW_H + 8
        for d in self.pending:
            self._layout_dialog(d)

    def _layout_dialog(self, d: Dialog) -> None:
        bw = sum(text_w(b.name) + 24 for b in d.buttons) + 8 * (len(d.buttons) - 1)
        w = min(self.width - 40, max(300, text_w(d.message) + 32, text_w(d.title) + 32, bw + 32))
        h = 24 + 28 + 44
        x, y = (self.width - w) // 2, max(BAR_H, (self.height - h) // 2)
        d.rect = Rect(x, y, w, h)
        bx = x + w - 16 - bw
        for b in d.buttons:
            b.x, b.y, b.w, b.h = bx, y + h - 38, text_w(b.name) + 24, WIDGET_H
            bx += b.w + 8

    # ---- geometry helpers ---------------------------------------------------------------------------------

    def panel_scroll(self) -> int:
        return self.scroll.get(self.active_tab, 0)

    def max_scroll(self) -> int:
        return max(0, self.panel_h.get(self.active_tab, 0) - self.viewport_h)

    def scroll_step(self) -> int:
        return max(ROW_H, (self.viewport_h // ROW_H - 1) * ROW_H)

    def on_panel(self, w: Widget) -> tuple[int, int] | None:
        """Screen (x, y) of a content widget's box when it is fully inside the viewport, else None."""
        sy = w.y + self.content_top - self.panel_scroll()
        if sy < self.content_top or sy + w.h > self.content_bottom:
            return None
        return w.x, sy

    def menu_columns(self) -> list[tuple[Rect, list[MenuNode], list[int]]]:
        cols: list[tuple[Rect, list[MenuNode], list[int]]] = []
        if not self.menu_path:
            return cols
        node = self.menus[self.menu_path[0]]
        r0 = self.menu_rects[self.menu_path[0]]
        x, y = r0.x, r0.y + r0.h
        for depth in range(len(self.menu_path)):
            if depth:
                node = node.children[self.menu_path[depth]]
            items = node.children
            w = max(text_w(n.name) for n in items) + 40
            h = len(items) * MENU_ROW_H
            x = min(x, self.width - w)
            y = max(BAR_H, min(y, self.height - BAR_H - h))
            cols.append((Rect(x, y, w, h), items, self.menu_path[: depth + 1]))
            if depth + 1 < len(self.menu_path):
                y = y + self.menu_path[depth + 1] * MENU_ROW_H
                x = x + w
        return cols

    def dropdown_rect(self) -> Rect | None:
        d = self.open_dropdown
        pos = self.on_panel(d) if d else None
        if d is None or pos is None:
            return None
        h = len(d.options) * MENU_ROW_H
        y = pos[1] + d.h if pos[1] + d.h + h <= self.content_bottom else pos[1] - h
        return Rect(d.x, max(BAR_H, y), d.w, h)

    # ---- the visible elements ------------------------------------------------------------------------------

    def elements(self) -> list[Element]:
        """Visible elements, topmost first (dialog, dropdown options, open menus, then the window)."""
        if self._cache and self._cache[0] == self.version:
            return self._cache[1]
        out: list[Element] = []
        covers: list[Rect] = []
        modal = bool(self.stack)
        if modal:
            d = self.stack[-1]
            r = d.rect
            out.append(Element("dialog", "dialog", d.title, r.x, r.y, r.w, r.h, d))
            out.append(
                Element("dialogtext", "text", d.message, r.x + 16, r.y + 26, min(r.w - 32, text_w(d.message)), 20, d)
            )
            for b in d.buttons:
                out.append(Element("dialogbtn", "button", b.name, b.x, b.y, b.w, b.h, b, d))
            covers.append(r)
        dr = self.dropdown_rect()
        if dr:
            for i, opt in enumerate(self.open_dropdown.options):  # type: ignore[union-attr]
                out.append(
                    Element(
                        "option",
                        "option",
                        opt,
                        dr.x,
                        dr.y + i * MENU_ROW_H,
                        dr.w,
                        MENU_ROW_H,
                        self.open_dropdown,
                        opt,
                        modal,
                    )
                )
            covers.append(dr)
        for rect, items, path in self.menu_columns():
            for i, n in enumerate(items):
                e = Element(
                    "menuitem",
                    "menuitem",
                    n.name,
                    rect.x,
                    rect.y + i * MENU_ROW_H,
                    rect.w,
                    MENU_ROW_H,
                    n,
                    path + [i],
                    modal,
                )
                out.append(e)
            covers.append(rect)

        def free(x: int, y: int, w: int, h: int) -> bool:
            for c in covers:
                if c.intersects(x, y, w, h):
                    return False
            return True

        for i, (m, r) in enumerate(zip(self.menus, self.menu_rects if self.menus else [])):
            if free(r.x, r.y, r.w, r.h):
                out.append(Element("menu", "menu", m.name, r.x, r.y, r.w, r.h, m, i, modal))
        for t, r in zip(self.tabs, self.tab_rects):
            if free(r.x, r.y, r.w, r.h):
                out.append(Element("tab", "tab", t, r.x, r.y, r.w, r.h, t, None, modal))
        scroll = self.panel_scroll()
        top, bottom = self.content_top, self.content_bottom
        for w in self.content:
            if w.tab != self.active_tab:
                continue
            sy = w.y + top - scroll
            if sy < top or sy + w.h > bottom:
                continue
            if w.role == "list":
                if free(w.x, sy, w.w, w.h):
                    out.append(Element("list", "list", w.name, w.x, sy, w.w, w.h, w, None, modal))
                for i in range(w.offset, min(len(w.items), w.offset + w.visible_rows)):
                    iy = sy + (i - w.offset) * LIST_ROW_H
                    if free(w.x, iy, w.w, LIST_ROW_H):
                        out.append(
                            Element("listitem", "listitem", w.items[i][0], w.x, iy, w.w, LIST_ROW_H, w, i, modal)
                        )
                continue
            if free(w.x, sy, w.w, w.h):
                out.append(Element("content", w.role, w.name, w.x, sy, w.w, w.h, w, None, modal))
        self._cache = (self.version, out)
        return out

    def text(self) -> str:
        """The compact text observation (see docs/sandbox.md for the format)."""
        if self._text_cache and self._text_cache[0] == self.version:
            return self._text_cache[1]
        lines = [f'window "{_q(self.title)}" {self.width}x{self.height}']
        for e in self.elements():
            lines.append(self._line(e))
        ms = self.max_scroll()
        if ms:
            s = self.panel_scroll()
            where = "more below" if s == 0 else "more above" if s >= ms else "more above and below"
            lines.append(f"page {where}")
        lines.append(f'status "{_q(self.status)}"')
        txt = "\n".join(lines)
        self._text_cache = (self.version, txt)
        return txt

    def _line(self, e: Element) -> str:
        st: list[str] = []
        if e.kind == "content":
            w: Widget = e.ref  # type: ignore[assignment]
            if w.role == "checkbox":
                st.append("checked" if w.checked else "unchecked")
            elif w.role in ("textbox", "dropdown", "text"):
                st.append(f'value="{_q(w.value or "")}"')
                if w is self.focus:
                    st.append("focused")
                if w is self.open_dropdown:
                    st.append("expanded")
            if not w.enabled:
                st.append("disabled")
        elif e.kind == "tab":
            if e.ref == self.active_tab:
                st.append("selected")
        elif e.kind == "menu":
            if self.menu_path and self.menu_path[0] == e.extra:
                st.append("expanded")
        elif e.kind == "menuitem":
            n: MenuNode = e.ref  # type: ignore[assignment]
            if n.children:
                path = e.extra
                st.append("expanded" if self.menu_path[: len(path)] == path else "submenu")  # type: ignore[arg-type]
            if not n.enabled:
                st.append("disabled")
        elif e.kind == "list":
            lw: Widget = e.ref  # type: ignore[assignment]
            last = min(len(lw.items), lw.offset + lw.visible_rows)
            st.append(f"rows {lw.offset + 1}-{last} of {len(lw.items)}")
        elif e.kind == "listitem":
            v = e.ref.items[e.extra][1]  # type: ignore[attr-defined,index]
            if v:
                st.append(f'value="{_q(v)}"')
        if e.blocked:
            st.append("blocked")
        s = " " + " ".join(st) if st else ""
        return f'{e.role} "{_q(e.name)}"{s} ({e.cx},{e.cy})'

    # ---- dynamics -------------------------------------------------------------------------------------------

    def _changed(self) -> None:
        self.version += 1

    def _show(self, trigger: str) -> None:
        keep = []
        for d in self.pending:
            if d.trigger == trigger:
                self.stack.append(d)
            else:
                keep.append(d)
        if len(keep) != len(self.pending):
            self.pending = keep
            self.focus, self.open_dropdown, self.menu_path = None, None, []

    def hit(self, px: int, py: int) -> Element | None:
        for e in self.elements():
            if e.kind not in ("dialog", "dialogtext", "list") and e.contains(px, py):
                return e
        return None

    def click(self, a: Action) -> str:
        """A left click (double clicks act the same). Returns what happened, in words."""
        px, py = a.x or 0, a.y or 0
        e = self.hit(px, py)
        self._changed()
        if self.stack:
            d = self.stack[-1]
            if e is not None and e.kind == "dialogbtn":
                return self._dialog_button(d, e.ref)  # type: ignore[arg-type]
            if d.rect.contains(px, py):
                return f'clicked the body of dialog "{d.title}": nothing happens'
            return f'blocked: the dialog "{d.title}" must be closed first'
        if self.open_dropdown is not None:
            dd = self.open_dropdown
            self.open_dropdown = None
            if e is not None and e.kind == "option":
                dd.value = e.extra  # type: ignore[assignment]
                return f'chose "{e.extra}" in dropdown "{dd.name}"'
            return f'closed dropdown "{dd.name}" without choosing'
        if self.menu_path:
            if e is not None and e.kind == "menuitem":
                n: MenuNode = e.ref  # type: ignore[assignment]
                if not n.enabled:
                    return f'menu item "{n.name}" is disabled'
                if n.children:
                    self.menu_path = list(e.extra)  # type: ignore[arg-type]
                    return f'opened submenu "{n.name}"'
                path = self._menu_names(e.extra)  # type: ignore[arg-type]
                self.menu_path = []
                self.events.append(("command", path))
                self.status = f"Ran {path}"
                return f"ran menu command {path}"
            if e is not None and e.kind == "menu" and e.extra != self.menu_path[0]:
                self.menu_path = [e.extra]  # type: ignore[list-item]
                return f'opened menu "{e.name}"'
            self.menu_path = []
            return "closed the menu"
        if e is None:
            self.focus = None
            return f"nothing at ({px}, {py})"
        if e.kind == "menu":
            self.menu_path = [e.extra]  # type: ignore[list-item]
            return f'opened menu "{e.name}"'
        if e.kind == "tab":
            return self._switch_tab(e.ref)  # type: ignore[arg-type]
        if e.kind == "listitem":
            lw: Widget = e.ref  # type: ignore[assignment]
            name = lw.items[e.extra][0]  # type: ignore[index]
            self.events.append(("open", lw.key, name))
            self.status = f"Opened {name}"
            return f'opened "{name}"'
        w: Widget = e.ref  # type: ignore[assignment]
        if w.role != "textbox":
            self.focus = None
        if not w.enabled:
            return f'{w.role} "{w.name}" is disabled: nothing happens'
        if w.role == "textbox":
            self.focus, self.select_all = w, False
            return f'focused text box "{w.name}"'
        if w.role == "checkbox":
            w.checked = not w.checked
            return f'{"ticked" if w.checked else "unticked"} checkbox "{w.name}"'
        if w.role == "dropdown":
            self.open_dropdown = w
            return f'opened dropdown "{w.name}"'
        if w.role == "button":
            return self._press(w)
        return f'clicked {w.role} "{w.name}": nothing happens'

    def _menu_names(self, path: list[int]) -> str:
        node = self.menus[path[0]]
        names = [node.name]
        for i in path[1:]:
            node = node.children[i]
            names.append(node.name)
        return " > ".join(names)

    def _switch_tab(self, tab: str) -> str:
        if tab == self.active_tab:
            return f'tab "{tab}" is already selected'
        self.active_tab, self.focus = tab, None
        self.events.append(("tab", tab))
        self._show(f"tab:{tab}")
        return f'switched to tab "{tab}"'

    def _press(self, w: Widget) -> str:
        if w.effect == "submit" and any(d.trigger == "submit" for d in self.pending):
            self.deferred = w
            self._show("submit")
            return f'pressed "{w.name}": a confirmation dialog appeared'
        self.events.append((w.effect, w.key))
        if w.effect in ("submit", "apply"):
            self.status = "Submitted" if w.effect == "submit" else "Applied"
        return f'pressed button "{w.name}"'

    def _dialog_button(self, d: Dialog, b: Widget) -> str:
        self.stack.pop()
        self.events.append(("dialog", d.key, b.effect, b.name))
        msg = f'pressed "{b.name}" in dialog "{d.title}"'
        if b.effect == "confirm" and self.deferred is not None:
            w, self.deferred = self.deferred, None
            self.events.append((w.effect, w.key))
            self.status = "Submitted"
            msg += f' and "{w.name}" went through'
        elif b.effect == "cancel":
            self.deferred = None
        self._show(f"after:{d.key}")
        return msg

    def type(self, a: Action) -> str:
        self._changed()
        f = self.focus
        if self.stack:
            return f'blocked: the dialog "{self.stack[-1].title}" must be closed first'
        if f is None or not f.enabled:
            return "typed, but no text box has focus: nothing happens"
        f.value = (a.text or "") if self.select_all else (f.value or "") + (a.text or "")
        self.select_all = False
        return f'typed into "{f.name}"'

    def hotkey(self, a: Action) -> str:
        self._changed()
        keys = (a.key or "").lower().split()
        k = " ".join("ctrl" if x in ("cmd", "meta", "control") else "escape" if x == "esc" else x for x in keys)
        if k == "escape":
            if self.open_dropdown is not None:
                self.open_dropdown = None
                return "closed the dropdown"
            if self.menu_path:
                self.menu_path = self.menu_path[:-1]
                return "closed the menu"
            if self.stack and self.stack[-1].escapable:
                d = self.stack[-1]
                benign = next((b for b in d.buttons if b.effect in ("dismiss", "cancel")), None)
                if benign is not None:
                    return self._dialog_button(d, benign)
            return "Esc: nothing to close"
        if self.stack:
            return f'blocked: the dialog "{self.stack[-1].title}" must be closed first'
        f = self.focus
        if k == "ctrl a":
            if f is None:
                return "select all: no text box has focus"
            self.select_all = True
            return f'selected all text in "{f.name}"'
        if k in ("backspace", "delete"):
            if f is None:
                return f"{k}: no text box has focus"
            f.value = "" if self.select_all else (f.value or "")[:-1]
            self.select_all = False
            return f'deleted text in "{f.name}"'
        if k == "tab":
            boxes = [w for w in self.content if w.tab == self.active_tab and w.role == "textbox" and w.enabled]
            if not boxes:
                return "tab: no text box to move to"
            i = boxes.index(f) + 1 if f in boxes else 0
            self.focus, self.select_all = boxes[i % len(boxes)], False
            return f'focus moved to "{self.focus.name}"'
        return f"hotkey {a.key}: no effect here"

    def scroll_by(self, a: Action) -> str:
        self._changed()
        if self.stack:
            return f'blocked: the dialog "{self.stack[-1].title}" must be closed first'
        if a.direction in ("left", "right"):
            return "nothing scrolls sideways here"
        sign = 1 if a.direction == "down" else -1
        px, py = a.x or 0, a.y or 0
        for e in self.elements():
            if e.kind == "list" and e.contains(px, py) or e.kind == "listitem" and e.contains(px, py):
                lw: Widget = e.ref  # type: ignore[assignment]
                top = max(0, len(lw.items) - lw.visible_rows)
                new = min(top, max(0, lw.offset + sign * max(1, lw.visible_rows - 2)))
                if new == lw.offset:
                    return f'list "{lw.name}" is already at the {"bottom" if sign > 0 else "top"}'
                lw.offset = new
                return f'scrolled list "{lw.name}" {a.direction}'
        if not (self.content_top <= py < self.content_bottom):
            return "nothing to scroll there"
        ms = self.max_scroll()
        if not ms:
            return "the page does not scroll"
        cur = self.panel_scroll()
        new = min(ms, max(0, cur + sign * self.scroll_step()))
        if new == cur:
            return f"the page is already at the {'bottom' if sign > 0 else 'top'}"
        self.scroll[self.active_tab] = new
        self.open_dropdown = None
        return f"scrolled the page {a.direction}"

    def act(self, a: Action) -> str:
        """Apply one parsed, on-screen action (finished is the environment's business, not the screen's)."""
        if a.kind in ("click", "left_double"):
            msg = self.click(a)
        elif a.kind == "type":
            msg = self.type(a)
        elif a.kind == "hotkey":
            msg = self.hotkey(a)
        elif a.kind == "scroll":
            msg = self.scroll_by(a)
        else:
            return self._inert(a)
        self._changed()
        return msg

    def _inert(self, a: Action) -> str:
        if a.kind == "right_single":
            return "right click: there is no context menu here"
        if a.kind == "drag":
            return "drag: nothing here can be dragged"
        if a.kind == "wait":
            return "waited: nothing changed"
        return f"{a.kind}: not available in a desktop window"

    # ---- queries for goals and demonstrators ----------------------------------------------------------------

    def find(self, key: str) -> Widget | None:
        for w in self.content:
            if w.key == key:
                return w
        return None

    def element_of(self, ref: object, extra: object = None) -> Element | None:
        for e in self.elements():
            same = e.ref is ref or (isinstance(ref, str) and e.ref == ref)
            if same and (extra is None or e.extra == extra) and e.kind not in ("list", "dialog", "dialogtext"):
                return e
        return None
