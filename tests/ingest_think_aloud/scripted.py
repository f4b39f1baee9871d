"""A scripted think-aloud actor for the tests and the benchmark: thoughts spoken with espeak-ng before each action."""

from __future__ import annotations

import io
from pathlib import Path

from ingest.formats.bundle import (
    BundleManifest,
    ScriptedStep,
    build_think_aloud_bundle,
    click_events,
    double_click_events,
    drag_events,
    hotkey_events,
    right_click_events,
    scroll_events,
    type_events,
)

W, H = 1280, 800

#: (thought, events, the action string the reducer must produce)
SCRIPT = [
    ("First I open the file menu at the top left corner.", click_events(40, 20),
     "click(point='<point>40 20</point>')"),
    ("Now I double click the report document to open it.", double_click_events(300, 240),
     "left_double(point='<point>300 240</point>')"),
    ("The title is wrong so I will type a new title.", type_events("Quarterly reprot\b\b\b\bport"),
     "type(content='Quarterly report')"),
    ("I save the changes with the keyboard shortcut.", hotkey_events("ctrl", "s"),
     "hotkey(key='ctrl s')"),
    ("Next I scroll down to find the summary table.", scroll_events(640, 500, "down", 4),
     "scroll(point='<point>640 500</point>', direction='down')"),
    ("I drag the picture into the second column.", drag_events(200, 600, 900, 620),
     "drag(start_point='<point>200 600</point>', end_point='<point>900 620</point>')"),
    ("Finally I right click the chart to change its colors.", right_click_events(700, 400),
     "right_single(point='<point>700 400</point>')"),
]  # fmt: skip


def screen_png(label: str, size: tuple[int, int] = (W, H)) -> bytes:
    from PIL import Image, ImageDraw

    im = Image.new("RGB", size, (235, 238, 242))
    d = ImageDraw.Draw(im)
    d.rectangle([0, 0, size[0], 40], fill=(40, 60, 90))
    d.text((20, 60), label, fill=(0, 0, 0))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def manifest(session_id: str = "ta-scripted-1", annotator: str = "jane.doe@example.com") -> BundleManifest:
    return BundleManifest(
        session_id=session_id,
        instruction="Fix the report title, save it and recolor the chart. Contact jane.doe@example.com if stuck.",
        screen_width=W,
        screen_height=H,
        annotator_id=annotator,
        group="expert",
        app="writer",
        platform="linux",
        meta={"recorded_by": "jane.doe@example.com", "host": "10.1.2.3"},
    )


def build(out: Path, session_id: str = "ta-scripted-1", archive: str | None = None, speech: bool = True) -> Path:
    steps = [ScriptedStep(t, ev, screen_png(f"step {i}: {t}")) for i, (t, ev, _) in enumerate(SCRIPT)]
    return build_think_aloud_bundle(out, manifest(session_id), steps, archive=archive, speech=speech)
