"""What the policy sees of a MiniWoB++ page: a compact text form of the DOM and a PNG of the task area.

The text has the sandbox's shape (docs/sandbox.md), so the same policy and prompt read both:

    window "click-checkboxes" 160x210
    checkbox "PK4gX" unchecked (16,61)
    ...
    button "Submit" (49,192)

One element per line, floating layers (dialogs, autocomplete menus) first, then the page in document order.
Roles: ``button textbox checkbox radio dropdown option link tab dialog text``. States: ``checked``/
``unchecked``, ``value="..."``, ``focused``, ``selected`` (tab). Coordinates are the integer centre of the
element's box in screenshot pixels (= CSS pixels x ``scale``). Elements outside the task area (160x210) or of
zero size are not listed. The instruction (MiniWoB's query box) is not repeated: it is the task instruction.

Built from miniwob's own DOM snapshot (``core.getDOMInfo`` -> miniwob.dom.DOMElement), plus the value of
<select> elements, which that snapshot leaves out.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image

BUTTON_TAGS = {"button", "input_button", "input_submit", "input_reset"}
TEXTBOX_TAGS = {
    f"input_{t}" for t in ("text", "password", "email", "number", "search", "tel", "url", "date", "time")
} | {"textarea"}
MAX_NAME = 80

_SELECT_JS = (
    "return Array.from(document.querySelectorAll('select')).map(s => "
    "[s.dataset.wob_ref ? +s.dataset.wob_ref : -1, s.selectedIndex >= 0 ? s.options[s.selectedIndex].text : '', "
    "Array.from(s.options).map(o => o.text)]);"
)


@dataclass(frozen=True)
class Element:
    role: str
    name: str
    states: tuple[str, ...]
    cx: int  # centre, screenshot pixels
    cy: int
    ref: int  # miniwob's element ref (stable within an episode)
    tag: str
    options: tuple[str, ...] = ()  # dropdown choices

    def line(self) -> str:
        st = "".join(f" {s}" for s in self.states)
        return f'{self.role} "{_q(self.name)}"{st} ({self.cx},{self.cy})'


def _q(s: str) -> str:
    s = " ".join(s.split()).replace('"', "'")
    return s if len(s) <= MAX_NAME else s[: MAX_NAME - 3] + "..."


def _cls(e) -> str:  # noqa: ANN001 - miniwob.dom.DOMElement
    return e.classes if isinstance(e.classes, str) else ""


def _text_of(e) -> str:  # noqa: ANN001
    if e.text:
        return e.text
    return " ".join(t for t in (_text_of(c) for c in e.children) if t)


class _Walker:
    def __init__(self, width: int, height: int, scale: int, selects: dict[int, tuple[str, tuple[str, ...]]]) -> None:
        self.w, self.h, self.scale, self.selects = width, height, scale, selects
        self.front: list[Element] = []
        self.page: list[Element] = []

    def add(
        self,
        out: list[Element],
        e,  # noqa: ANN001
        role: str,
        name: str,
        states: tuple[str, ...] = (),
        options: tuple[str, ...] = (),
    ) -> None:
        if e.width <= 0 or e.height <= 0:
            return
        cx, cy = e.left + e.width / 2, e.top + e.height / 2
        if not (0 <= cx < self.w and 0 <= cy < self.h):
            return
        out.append(Element(role, name, states, int(cx * self.scale), int(cy * self.scale), e.ref, e.tag, options))

    def walk(self, e, out: list[Element]) -> None:  # noqa: ANN001 - one branch per kind of element
        tag, cls, classes = e.tag, _cls(e), set(_cls(e).split())
        if classes & {"ui-helper-hidden-accessible", "ui-resizable-handle", "ui-dialog-title"}:
            return
        if classes & {"ui-dialog", "ui-autocomplete"}:
            layer: list[Element] = []
            if "ui-dialog" in classes:
                title = next((_text_of(t) for t in e.subtree_elements if "ui-dialog-title" in _cls(t).split()), "")
                self.add(layer, e, "dialog", title)
            for c in e.children:
                self.walk(c, layer)
            self.front.extend(layer)
            return
        if tag in BUTTON_TAGS:
            name = (
                _text_of(e)
                or (e.value if isinstance(e.value, str) else "")
                or ("close" if "ui-dialog-titlebar-close" in classes else e.id)
            )
            self.add(out, e, "button", name)
        elif tag in TEXTBOX_TAGS:
            st = (f'value="{_q(str(e.value))}"',) if e.value else ()
            self.add(out, e, "textbox", e.id, st + (("focused",) if e.focused else ()))
        elif tag in ("input_checkbox", "input_radio"):
            label = e.parent if e.parent is not None and e.parent.tag == "label" else None
            name = _text_of(label) if label is not None else e.id
            self.add(
                out,
                e,
                "checkbox" if tag == "input_checkbox" else "radio",
                name,
                ("checked" if e.value else "unchecked",),
            )
        elif tag == "select":
            value, options = self.selects.get(e.ref, ("", ()))
            self.add(out, e, "dropdown", e.id, (f'value="{_q(value)}"',) + (("focused",) if e.focused else ()), options)
        elif "ui-menu-item" in classes:
            self.add(out, e, "option", _text_of(e))
        elif tag == "a" and "ui-tabs-anchor" in cls:
            sel = e.parent is not None and "ui-tabs-active" in _cls(e.parent)
            self.add(out, e, "tab", _text_of(e), ("selected",) if sel else ())
        elif tag == "a" or "alink" in classes:
            self.add(out, e, "link", _text_of(e))
        elif tag == "label" and any(c.tag in ("input_checkbox", "input_radio") for c in e.children):
            for c in e.children:
                if c.tag in ("input_checkbox", "input_radio"):
                    self.walk(c, out)
        elif not e.children:
            if e.text:
                self.add(out, e, "text", e.text)
        else:
            for c in e.children:
                self.walk(c, out)


def elements(root, width: int, height: int, scale: int = 1, selects: dict | None = None) -> list[Element]:  # noqa: ANN001
    """The listed elements of a page, floating layers first."""
    w = _Walker(width, height, scale, selects or {})
    w.walk(root, w.page)
    return w.front + w.page


def render_text(task: str, els: list[Element], width: int, height: int) -> str:
    return "\n".join([f'window "{task}" {width}x{height}', *(e.line() for e in els)])


def snapshot(driver, task: str, width: int, height: int, scale: int = 1) -> tuple[str, list[Element]]:  # noqa: ANN001
    """(text observation, elements) of the page a Selenium driver shows."""
    from miniwob.dom import DOMElement

    root = DOMElement(driver.execute_script("return core.getDOMInfo();"))
    selects = {ref: (val, tuple(opts)) for ref, val, opts in driver.execute_script(_SELECT_JS) or []}
    els = elements(root, width // scale, height // scale, scale, selects)
    return render_text(task, els, width, height), els


def screenshot_png(
    driver,  # noqa: ANN001
    inner_width: int,
    inner_height: int,
    task_width: int,
    task_height: int,
    scale: int = 1,
) -> bytes:
    """The task area as PNG, task_width*scale x task_height*scale pixels."""
    from miniwob.screenshot import get_screenshot

    img = get_screenshot(driver, inner_width, inner_height, task_width, task_height)
    if scale != 1:
        img = img.resize((task_width * scale, task_height * scale), Image.Resampling.NEAREST)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False, compress_level=1)
    return buf.getvalue()
