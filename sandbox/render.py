"""Screenshots: draw a screen with Pillow and encode it as PNG, deterministically (same state, same bytes).

Rendering is separate from the text observation and optional per step, so text-only rollouts never pay for
it. The drawing uses the layout the text observation reports, so a click at a listed centre lands on the
drawn widget. Pillow's bundled font is used (no system fonts), which keeps the bytes stable across machines
with the same Pillow version.
"""

from __future__ import annotations

import io
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

from sandbox.screen import Screen
from sandbox.widgets import BAR_H, LIST_ROW_H, MENU_ROW_H

BG = (246, 247, 249)
INK = (30, 33, 38)
MUTED = (150, 154, 160)
LINE = (180, 185, 192)
ACCENT = (40, 110, 220)
BUTTON = (225, 232, 244)
TITLE = (52, 58, 70)


@lru_cache(maxsize=4)
def _font(size: int = 12) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _text(d: ImageDraw.ImageDraw, x: int, y: int, s: str, fill: tuple[int, int, int] = INK, anchor: str = "lm") -> None:
    d.text((x, y), s, fill=fill, font=_font(), anchor=anchor)


def render(screen: Screen) -> Image.Image:
    """The screen as an RGB image of screen.width x screen.height pixels."""
    W, H = screen.width, screen.height
    img = Image.new("RGB", (W, H), BG)
    d = ImageDraw.Draw(img)
    d.rectangle((0, 0, W, BAR_H - 1), fill=TITLE)
    _text(d, W // 2, BAR_H // 2, screen.title, (240, 240, 240), "mm")
    if screen.menus:
        d.rectangle((0, BAR_H, W, 2 * BAR_H - 1), fill=(232, 234, 238))
        for i, (m, r) in enumerate(zip(screen.menus, screen.menu_rects)):
            if screen.menu_path and screen.menu_path[0] == i:
                d.rectangle((r.x, r.y, r.x + r.w - 1, r.y + r.h - 1), fill=(205, 215, 235))
            _text(d, r.x + r.w // 2, r.y + r.h // 2, m.name, anchor="mm")
    for t, r in zip(screen.tabs, screen.tab_rects):
        sel = t == screen.active_tab
        d.rectangle(
            (r.x, r.y, r.x + r.w - 1, r.y + r.h - 1), fill=(255, 255, 255) if sel else (226, 229, 234), outline=LINE
        )
        if sel:
            d.line((r.x + 1, r.y + r.h - 1, r.x + r.w - 2, r.y + r.h - 1), fill=(255, 255, 255))
        _text(d, r.x + r.w // 2, r.y + r.h // 2, t, INK if sel else MUTED, "mm")
    _draw_panel(screen, d)
    d.rectangle((0, H - BAR_H, W, H), fill=(232, 234, 238))
    _text(d, 8, H - BAR_H // 2, screen.status, MUTED)
    ms = screen.max_scroll()
    if ms:
        top, vh = screen.content_top, screen.viewport_h
        th = max(20, vh * vh // (vh + ms))
        ty = top + (vh - th) * screen.panel_scroll() // ms
        d.rectangle((W - 5, ty, W - 2, ty + th), fill=LINE)
    _draw_overlays(screen, d)
    if screen.stack:
        img = _draw_dialog(screen, img)
    return img


def _draw_panel(screen: Screen, d: ImageDraw.ImageDraw) -> None:
    top, bottom, scroll = screen.content_top, screen.content_bottom, screen.panel_scroll()
    for w in screen.content:
        if w.tab != screen.active_tab:
            continue
        y = w.y + top - scroll
        if y < top or y + w.h > bottom:
            continue
        x, x2, y2 = w.x, w.x + w.w - 1, y + w.h - 1
        cy = y + w.h // 2
        fg = INK if w.enabled else MUTED
        if w.role == "button":
            d.rounded_rectangle((x, y, x2, y2), 5, fill=BUTTON if w.enabled else (236, 237, 240), outline=LINE)
            _text(d, x + w.w // 2, cy, w.name, fg, "mm")
        elif w.role in ("textbox", "dropdown"):
            _text(d, x - w.label_w, cy, w.name, fg)
            focused = w is screen.focus or w is screen.open_dropdown
            d.rectangle(
                (x, y, x2, y2), fill=(255, 255, 255), outline=ACCENT if focused else LINE, width=2 if focused else 1
            )
            _text(d, x + 6, cy, (w.value or "") + ("|" if w is screen.focus else ""), fg)
            if w.role == "dropdown":
                d.polygon([(x2 - 16, cy - 3), (x2 - 6, cy - 3), (x2 - 11, cy + 3)], fill=fg)
        elif w.role == "checkbox":
            d.rectangle((x + 2, cy - 7, x + 16, cy + 7), fill=(255, 255, 255), outline=fg)
            if w.checked:
                d.line((x + 5, cy, x + 8, cy + 4, x + 14, cy - 5), fill=ACCENT if w.enabled else MUTED, width=2)
            _text(d, x + 24, cy, w.name, fg)
        elif w.role == "text":
            _text(d, x, cy, f"{w.name}: {w.value}", fg)
        elif w.role == "list":
            d.rectangle((x, y, x2, y2), fill=(255, 255, 255), outline=LINE)
            for i in range(w.offset, min(len(w.items), w.offset + w.visible_rows)):
                ry = y + (i - w.offset) * LIST_ROW_H
                if i % 2:
                    d.rectangle((x + 1, ry, x2 - 8, ry + LIST_ROW_H - 1), fill=(243, 245, 248))
                name, value = w.items[i]
                _text(d, x + 8, ry + LIST_ROW_H // 2, name)
                if value:
                    _text(d, x2 - 14, ry + LIST_ROW_H // 2, value, MUTED, "rm")
            n = max(1, len(w.items))
            sy = y + w.h * w.offset // n
            d.rectangle((x2 - 6, sy, x2 - 2, sy + max(8, w.h * w.visible_rows // n) - 1), fill=LINE)


def _draw_overlays(screen: Screen, d: ImageDraw.ImageDraw) -> None:
    dr = screen.dropdown_rect()
    if dr is not None and screen.open_dropdown is not None:
        d.rectangle((dr.x, dr.y, dr.x + dr.w - 1, dr.y + dr.h - 1), fill=(255, 255, 255), outline=LINE)
        for i, opt in enumerate(screen.open_dropdown.options):
            _text(d, dr.x + 8, dr.y + i * MENU_ROW_H + MENU_ROW_H // 2, opt)
    for rect, items, path in screen.menu_columns():
        d.rectangle((rect.x, rect.y, rect.x + rect.w - 1, rect.y + rect.h - 1), fill=(255, 255, 255), outline=LINE)
        for i, n in enumerate(items):
            iy = rect.y + i * MENU_ROW_H
            if screen.menu_path[: len(path) + 1] == path + [i]:
                d.rectangle((rect.x + 1, iy, rect.x + rect.w - 2, iy + MENU_ROW_H - 1), fill=(205, 215, 235))
            _text(d, rect.x + 10, iy + MENU_ROW_H // 2, n.name, INK if n.enabled else MUTED)
            if n.children:
                cx, cy = rect.x + rect.w - 12, iy + MENU_ROW_H // 2
                d.polygon([(cx, cy - 4), (cx, cy + 4), (cx + 5, cy)], fill=INK)


def _draw_dialog(screen: Screen, img: Image.Image) -> Image.Image:
    shade = Image.new("RGB", img.size, (0, 0, 0))
    img = Image.blend(img, shade, 0.35)
    d = ImageDraw.Draw(img)
    dlg = screen.stack[-1]
    r = dlg.rect
    d.rectangle((r.x, r.y, r.x + r.w - 1, r.y + r.h - 1), fill=(255, 255, 255), outline=TITLE)
    d.rectangle((r.x, r.y, r.x + r.w - 1, r.y + 21), fill=TITLE)
    _text(d, r.x + 10, r.y + 11, dlg.title, (240, 240, 240))
    _text(d, r.x + 16, r.y + 36, dlg.message)
    for b in dlg.buttons:
        d.rounded_rectangle((b.x, b.y, b.x + b.w - 1, b.y + b.h - 1), 5, fill=BUTTON, outline=LINE)
        _text(d, b.x + b.w // 2, b.y + b.h // 2, b.name, anchor="mm")
    return img


def render_png(screen: Screen, compress_level: int = 6) -> bytes:
    """PNG bytes of the screen (no timestamps or other metadata, so equal screens give equal bytes)."""
    buf = io.BytesIO()
    render(screen).save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()
