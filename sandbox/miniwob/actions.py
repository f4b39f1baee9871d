"""The action grammar as real input events in the browser (W3C WebDriver actions: pointer, wheel, keys).

Coordinates are screenshot pixels; they are divided by the observation scale to get CSS pixels of the page
viewport (the task area is the top-left 160x210 of it). Nothing here clicks through JavaScript: a click is a
pointer move + press + release at that point, so whatever is on top there gets it, as for a person.

    click / left_double / right_single   pointer at (x, y)
    drag                                 press at the start point, move, release at the end point
    type(content)                        one key down/up per character, into whatever has focus
    hotkey(key='ctrl a')                 modifiers held while the last key is pressed
    scroll(point, direction)             mouse wheel at the point (one notch: 50 px, miniwob's default)
    wait()                               lets the page run for a moment (autocomplete menus appear after 300 ms)
    finished / press_home / press_back   no event (the environment handles finished)
"""

from __future__ import annotations

import time

from schemas.actions import Action

WAIT_S = 0.5
SCROLL_PX = 50

_MODIFIERS = {
    "ctrl": "CONTROL",
    "control": "CONTROL",
    "shift": "SHIFT",
    "alt": "ALT",
    "meta": "META",
    "cmd": "META",
    "command": "META",
}
_SPECIAL = {
    "enter": "ENTER", "return": "ENTER", "tab": "TAB", "escape": "ESCAPE", "esc": "ESCAPE", "backspace": "BACKSPACE",
    "delete": "DELETE", "space": "SPACE", "up": "ARROW_UP", "down": "ARROW_DOWN", "left": "ARROW_LEFT",
    "right": "ARROW_RIGHT", "arrowup": "ARROW_UP", "arrowdown": "ARROW_DOWN", "arrowleft": "ARROW_LEFT",
    "arrowright": "ARROW_RIGHT", "home": "HOME", "end": "END", "pageup": "PAGE_UP", "pagedown": "PAGE_DOWN",
}  # fmt: skip


class UnsupportedKey(ValueError):
    pass


def _key(name: str) -> str:
    from selenium.webdriver.common.keys import Keys

    n = name.lower()
    if n in _MODIFIERS:
        return getattr(Keys, _MODIFIERS[n])
    if n in _SPECIAL:
        return getattr(Keys, _SPECIAL[n])
    if len(name) == 1:
        return name
    if n.startswith("f") and n[1:].isdigit() and 1 <= int(n[1:]) <= 12:
        return getattr(Keys, n.upper())
    raise UnsupportedKey(f"unknown key {name!r}")


def perform(driver, a: Action, scale: int = 1) -> str:  # noqa: ANN001 - one branch per action kind
    """Send the action's input events; return what was done, in words (the step's `effect`)."""
    from selenium.webdriver.common.action_chains import ActionChains

    def at(x: int, y: int) -> tuple[int, int]:
        return x // scale, y // scale

    k = a.kind
    if k in ("click", "left_double", "right_single"):
        x, y = at(a.x, a.y)  # type: ignore[arg-type]
        chain = ActionChains(driver, duration=0)
        chain.w3c_actions.pointer_action.move_to_location(x, y)
        if k == "click":
            chain.w3c_actions.pointer_action.click()
        elif k == "left_double":
            chain.w3c_actions.pointer_action.double_click()
        else:
            chain.w3c_actions.pointer_action.context_click()
        chain.w3c_actions.perform()
        return f"{k} at ({x},{y})"
    if k == "drag":
        (x1, y1), (x2, y2) = at(a.x, a.y), at(a.x2, a.y2)  # type: ignore[arg-type]
        chain = ActionChains(driver, duration=0)
        p = chain.w3c_actions.pointer_action
        p.move_to_location(x1, y1)
        p.click_and_hold()
        p.move_to_location((x1 + x2) // 2, (y1 + y2) // 2)
        p.move_to_location(x2, y2)
        p.release()
        chain.w3c_actions.perform()
        return f"drag ({x1},{y1}) -> ({x2},{y2})"
    if k == "type":
        chain = ActionChains(driver, duration=0)
        for ch in a.text or "":
            chain.w3c_actions.key_action.key_down(ch)
            chain.w3c_actions.key_action.key_up(ch)
        chain.perform()
        return f"typed {len(a.text or '')} characters"
    if k == "hotkey":
        keys = [_key(n) for n in (a.key or "").split()]
        chain = ActionChains(driver, duration=0)
        for key in keys[:-1]:
            chain.w3c_actions.key_action.key_down(key)
        chain.w3c_actions.key_action.key_down(keys[-1])
        chain.w3c_actions.key_action.key_up(keys[-1])
        for key in reversed(keys[:-1]):
            chain.w3c_actions.key_action.key_up(key)
        chain.perform()
        return f"pressed {a.key}"
    if k == "scroll":
        x, y = at(a.x, a.y)  # type: ignore[arg-type]
        dx, dy = {"up": (0, -SCROLL_PX), "down": (0, SCROLL_PX), "left": (-SCROLL_PX, 0), "right": (SCROLL_PX, 0)}[
            a.direction
        ]  # type: ignore[index]
        chain = ActionChains(driver)
        chain.w3c_actions.wheel_action.scroll(x=x, y=y, delta_x=dx, delta_y=dy, duration=150)
        chain.w3c_actions.perform()
        return f"scrolled {a.direction} at ({x},{y})"
    if k == "wait":
        time.sleep(WAIT_S)
        return "waited"
    return f"{k}: nothing to do in a browser"
