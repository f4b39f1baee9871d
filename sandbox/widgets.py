"""Widgets: the mutable building blocks of a sandbox screen, and the geometry they share.

Widgets are plain slotted objects (not frozen): a step mutates a few of them in place, which keeps an
environment step in the tens of microseconds. Coordinates are integer pixels; a widget's box is (x, y, w, h)
and its centre is what the text observation reports, so a policy can copy it into an action.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Roles a widget can have (the first word of its line in the text observation).
ROLES = (
    "button", "textbox", "checkbox", "dropdown", "option", "menu", "menuitem", "tab", "list", "listitem",
    "dialog", "text",
)  # fmt: skip

#: Layout constants (pixels). Character width is the layout's estimate; the renderer's font is close to it.
CHAR_W = 7
ROW_H = 36  # content grid row
WIDGET_H = 28
LIST_ROW_H = 24
MENU_ROW_H = 24
BAR_H = 24  # title bar, menu bar, status bar
TAB_H = 28


def text_w(s: str) -> int:
    return CHAR_W * len(s)


@dataclass(slots=True, eq=False)
class Widget:
    """One element. `key` is its stable identity (goals refer to it); `name` is what a user reads.

    Content widgets have their box in panel coordinates (the panel scrolls); chrome, overlays and dialogs in
    screen coordinates. `effect` says what a click does for buttons ("press", "submit", "apply", "dismiss",
    "harm", "confirm", "cancel", "none").
    """

    role: str
    name: str
    x: int = 0
    y: int = 0
    w: int = 0
    h: int = WIDGET_H
    key: str = ""
    enabled: bool = True
    checked: bool | None = None
    value: str | None = None
    tab: str | None = None
    options: tuple[str, ...] = ()
    effect: str = "press"
    label_w: int = 0  # textbox/dropdown: the label drawn left of the box
    span: int = 1  # grid columns the widget takes (lists take the full width)
    rows: int = 1  # grid rows the widget takes
    items: list[tuple[str, str]] = field(default_factory=list)  # list: (name, value) rows
    offset: int = 0  # list: first visible row
    visible_rows: int = 0  # list: rows shown at once

    def __post_init__(self) -> None:
        if not self.key:
            self.key = f"{self.role}:{self.name}"

    def contains(self, px: int, py: int, dy: int = 0) -> bool:
        return self.x <= px < self.x + self.w and self.y - dy <= py < self.y - dy + self.h

    def center(self, dy: int = 0) -> tuple[int, int]:
        return self.x + self.w // 2, self.y - dy + self.h // 2


@dataclass(slots=True)
class Rect:
    x: int
    y: int
    w: int
    h: int

    def contains(self, px: int, py: int) -> bool:
        return self.x <= px < self.x + self.w and self.y <= py < self.y + self.h

    def intersects(self, x: int, y: int, w: int, h: int) -> bool:
        return x < self.x + self.w and self.x < x + w and y < self.y + self.h and self.y < y + h


@dataclass(slots=True, eq=False)
class MenuNode:
    """A menu bar entry or menu item; leaves are commands, inner nodes open a submenu."""

    name: str
    children: list[MenuNode] = field(default_factory=list)
    enabled: bool = True


@dataclass(slots=True, eq=False)
class Dialog:
    """A modal dialog. `trigger` says when it appears: "start", "after:<key>", "tab:<name>" or "submit"."""

    key: str
    title: str
    message: str
    buttons: list[Widget]
    trigger: str = "start"
    escapable: bool = True  # Esc dismisses it (like its benign button)
    rect: Rect = field(default_factory=lambda: Rect(0, 0, 0, 0))
