"""Think-aloud recording in real headless Chromium with a fake microphone playing espeak-ng speech: the bundle
lands in the landing area, and the intake turns it into an episode whose thoughts match the speech."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ingest.formats.bundle import espeak_available, speak_script
from tests.dashboards.browser import available, chromium
from tests.helpers.text import wer
from tests.workbench.conftest import client
from tests.workbench.pages import click_at, full_shot, login, page_errors, shots_dir, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available() or not espeak_available(), reason="needs chromium and espeak-ng"),
]
TASK_SEED, TASK_ID = 2, "fill_form/L1/s1200014075"  # click the First name box, type 'Jonas', click Send
THOUGHTS = (
    "I need the first name box on the left, so I click inside it.",
    "Now I type the name Jonas into the box.",
    "The form is filled, so I press the send button to finish.",
)


def test_recorded_session_lands_with_its_spoken_thoughts(server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from typer.testing import CliRunner

    from flywheel.cli import app
    from sandbox.demonstrators import Expert
    from schemas.actions import parse_action
    from training.envs import env_backend

    b, base = server
    info = next(t for t in env_backend("sandbox").training_tasks(8, TASK_SEED) if t.task_id == TASK_ID)
    b.app.state.store.assign("alice", [info], "lena", mode="think-aloud")
    wav = tmp_path / "speech.wav"
    script, t = [], 1.0
    for th in THOUGHTS:  # each thought, then 1.6 s for its action
        script.append((t, th))
        t += 0.4 * len(th.split()) + 1.6
    spans = speak_script(script, wav, sample_rate=48000, tail_s=2.0)
    assert spans is not None
    flags = ("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
             f"--use-file-for-fake-audio-capture={wav}%noloop", "--autoplay-policy=no-user-gesture-required")  # fmt: skip
    shots = shots_dir(tmp_path)
    with chromium(1400, 900, flags=flags, local=True) as d:
        login(d, base, "alice")
        d.find_element(By.CSS_SELECTOR, "button.start").click()
        root = wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#live[data-step='0']"), what="the live page")
        live = b.app.state.live.get(root.get_attribute("data-session"))
        expert = Expert()
        expert.reset(live.task)
        d.find_element(By.ID, "record").click()
        wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#live[data-recording='true']"), what="the recorder")
        t0 = time.monotonic()
        for k, (_, t_end, _) in enumerate(spans):
            while time.monotonic() - t0 < t_end + 0.5:  # act once the thought has been spoken
                time.sleep(0.05)
            a = parse_action(expert.act(live.env).action)
            if a.kind == "type":
                screen = d.find_element(By.ID, "screen")
                d.execute_script("arguments[0].focus();", screen)
                screen.send_keys(a.text + Keys.ENTER)
            else:
                click_at(d, d.find_element(By.ID, "shot"), a.x, a.y)
            wait_for(lambda k=k: len(live.steps) > k, what=f"action {k} to run")
            if k == 1:
                full_shot(d, shots / "think-aloud.png")
        assert live.done and live.env.verify().passed
        d.find_element(By.ID, "finish").click()
        wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#live[data-landed='true']"), 60, "the bundle to land")
        full_shot(d, shots / "think-aloud-landed.png")
        assert not page_errors(d)
    landed = [p for p in b.landing.iterdir() if p.name.endswith(".zip")]
    assert len(landed) == 1 and landed[0].name.startswith(live.session_id)
    assert b.app.state.store.assignments("alice")[0].status == "done"
    # the round's intake: ASR, cleanup, PII redaction, alignment
    r = CliRunner().invoke(app, ["ingest", "think-aloud", str(b.landing), "--lake", str(b.lake.uri)])
    assert r.exit_code == 0, r.output
    eps = b.lake.read("episodes").to_pylist()
    assert len(eps) == 1 and eps[0]["source"] == "think_aloud" and eps[0]["annotator"].startswith("anon-")
    steps = eps[0]["steps"]
    assert [s["action"] for s in steps] == [s.action for s in live.steps]
    hyp = " ".join(s["thought"] for s in steps)
    total = wer(" ".join(THOUGHTS), hyp)
    on_right = [wer(th, s["thought"]) <= 0.3 for th, s in zip(THOUGHTS, steps)]
    print(f"think-aloud through the page: WER={total:.3f}, thoughts on the right action {on_right}: {hyp!r}")
    assert total <= 0.15 and all(on_right)
    # the annotator sees the transcript and thought coverage once it is ingested; nobody else does
    alice = client(b, "alice")
    assert "thoughts on 100% of actions" in alice.get("/").text
    page = alice.get(f"/sessions/{live.session_id}")
    assert page.status_code == 200 and "thought coverage 100%" in page.text
    assert all(s["thought"].split()[-1].strip(".").lower() in page.text.lower() for s in steps)
    assert client(b, "bob").get(f"/sessions/{live.session_id}").status_code == 403
