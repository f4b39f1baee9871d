"""Synthetic Episode objects for validator and routing tests (until ingestion lands real ones).

Screenshots are real PNG files (PIL), stored in the lake's object store or a folder, so the screenshot validator
decodes real bytes.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import replace
from pathlib import Path
from typing import Any

from PIL import Image

from schemas.records import Episode, Step

W, H = 320, 240


def png_bytes(seed: int = 0, size: tuple[int, int] = (16, 12)) -> bytes:
    im = Image.new("RGB", size, ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def store_png(where: Any, seed: int = 0) -> tuple[str, str]:
    """(uri, sha256) of a real PNG: in `where`'s object store when it is a Lake, else as a file in folder `where`."""
    data = png_bytes(seed)
    sha = hashlib.sha256(data).hexdigest()
    if hasattr(where, "objects"):
        return where.objects.put_object(data, ".png"), sha
    p = Path(where) / f"{sha}.png"
    p.write_bytes(data)
    return str(p), sha


ACTIONS = [
    "click(point='<point>10 20</point>')",
    "type(content='hello world')",
    "scroll(point='<point>100 100</point>', direction='down')",
    "hotkey(key='ctrl s')",
    "drag(start_point='<point>1 2</point>', end_point='<point>300 200</point>')",
    "left_double(point='<point>5 5</point>')",
    "wait()",
]


def make_steps(
    n: int, shot: tuple[str, str], actions: list[str] | None = None, thought: str = "I look at the screen"
) -> tuple[Step, ...]:
    acts = actions or [ACTIONS[i % len(ACTIONS)] for i in range(n - 1)] + ["finished(content='done')"]
    return tuple(
        Step(
            index=i,
            action=a,
            thought=f"{thought} {i}",
            t_start=float(i),
            t_end=float(i) + 0.5,
            screenshot_uri=shot[0],
            screenshot_sha256=shot[1],
            observation=f"window with button {i}",
        )
        for i, a in enumerate(acts)
    )


def make_episode(
    shot: tuple[str, str], *, n_steps: int = 4, source: str = "rollout", task: str = "t1", i: int = 0, **kw: Any
) -> Episode:
    """A valid episode of `source` (passes every structural validator and a rollout's env verdict)."""
    base: dict[str, Any] = dict(
        session_id=f"s{i}",
        source=source,
        task_id=task,
        instruction=f"Save the document number {i}",
        steps=make_steps(n_steps, shot),
        round=1,
        task_family="office",
        screen_width=W,
        screen_height=H,
        outcome="finished",
        final_answer="done",
        attempt=i,
    )
    if source == "rollout":
        base.update(env_passed=True, env_reward=1.0, policy_version="p0", group_id=f"g-{task}")
    base.update(kw)
    return Episode(**base)


def with_step(ep: Episode, index: int, **changes: Any) -> Episode:
    """A copy of `ep` with step `index` changed (a new content hash, so a new episode id)."""
    steps = list(ep.steps)
    steps[index] = replace(steps[index], **changes)
    return replace(ep, steps=tuple(steps), episode_id="")
