"""Screenshots: real PNGs of the configured size for every family, stable bytes, and they show state changes."""

from __future__ import annotations

import io

from PIL import Image

from sandbox.demonstrators import Expert
from sandbox.env import Env
from sandbox.families import FAMILIES
from sandbox.tasks import make_task


def test_every_family_renders_and_screens_change_with_actions() -> None:
    for fam in FAMILIES:
        t = make_task(fam, 5, 2)
        env, ex = Env(t, screenshots=True), Expert()
        ex.reset(t)
        first = env.observation().screenshot
        img = Image.open(io.BytesIO(first))
        assert img.size == (640, 400) and img.format == "PNG"
        assert sum(1 for v in img.convert("L").histogram() if v) > 10  # not a blank frame
        shots = {first}
        while not env.done:
            shots.add(env.step(ex.act(env).action).observation.screenshot)
        assert len(shots) > 1
        assert env.screenshot() == env.screenshot()


def test_text_path_does_not_render() -> None:
    env = Env(make_task("popup", 2, 1))
    assert env.observation().screenshot is None
    assert env.step("wait()").observation.screenshot is None
