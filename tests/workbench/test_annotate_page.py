"""Interactive annotation in real headless Chromium: the newest checkpoint proposes, the person accepts or
overrides on the remote screen, the session lands with its preference pair, and `flywheel route` routes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboards.browser import available, chromium
from tests.workbench.pages import click_at, full_shot, login, page_errors, shots_dir, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="needs chromium and chromedriver")]

# fill_form/L1/s1200014075 (training_tasks(8, seed=2)): three steps; the base model proposes the expert's move
# at two of them, so the person accepts two proposals and overrides one.
TASK_SEED, TASK_ID = 2, "fill_form/L1/s1200014075"


def test_accept_two_override_one_lands_a_preference_pair(server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from typer.testing import CliRunner

    from flywheel.cli import app
    from sandbox.demonstrators import Expert, same_move
    from schemas.actions import parse_action
    from training.envs import env_backend

    b, base = server
    info = next(t for t in env_backend("sandbox").training_tasks(8, TASK_SEED) if t.task_id == TASK_ID)
    b.app.state.store.assign("alice", [info], "lena")
    shots = shots_dir(tmp_path)
    decisions = []
    with chromium(1400, 900, local=True) as d:
        login(d, base, "alice")
        d.find_element(By.CSS_SELECTOR, "button.start").click()
        root = wait_for(
            lambda: d.find_element(By.CSS_SELECTOR, "#live[data-step='0']"), 180, "the live page and the model"
        )
        sid = root.get_attribute("data-session")
        live = b.app.state.live.get(sid)
        expert = Expert()
        expert.reset(live.task)
        while not live.done:
            step = len(live.steps)
            wait_for(lambda step=step: d.find_elements(By.CSS_SELECTOR, f"#live[data-step='{step}'] .proposal button.accept"),
                     what=f"proposals of step {step}")  # fmt: skip
            n_props = len(live.proposals)
            marks = d.find_elements(By.CSS_SELECTOR, "#marks circle")
            assert len(marks) == sum(p.x is not None for p in live.proposals)  # every click point is drawn
            want = expert.act(live.env)
            match = next((i for i, p in enumerate(live.proposals) if same_move(live.env.screen, p.action, want.action)), None)  # fmt: skip
            if step == 0:
                full_shot(d, shots / "annotate.png")
            if match is not None:
                d.find_elements(By.CSS_SELECTOR, ".proposal button.accept")[match].click()
                decisions.append("accepted")
            else:
                a = parse_action(want.action)
                screen = d.find_element(By.ID, "screen")
                if a.kind == "type":
                    d.execute_script("arguments[0].focus();", screen)
                    screen.send_keys(a.text)
                else:
                    assert a.kind == "click", a
                    click_at(d, d.find_element(By.ID, "shot"), a.x, a.y)
                wait_for(lambda: d.find_element(By.ID, "pending").text != "(none)", what="the pending action")
                d.find_element(By.ID, "thought").send_keys(want.thought or "the form needs this first")
                full_shot(d, shots / "annotate-override.png")
                d.find_element(By.ID, "run").click()
                decisions.append("overridden")
            wait_for(lambda step=step: len(live.steps) > step, what=f"step {step} to run")
            assert n_props >= 1
        wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#live[data-done='true']"), what="the episode to end")
        d.find_element(By.ID, "finish").click()
        wait_for(lambda: d.find_element(By.CSS_SELECTOR, "#live[data-landed='true']"), what="landing")
        wait_for(lambda: "preference pair" in d.find_element(By.ID, "message").text, what="the landed message")
        full_shot(d, shots / "annotate-landed.png")
        assert not page_errors(d)
        d.get(f"{base}/")
        assert "done" in d.find_element(By.CSS_SELECTOR, "tr[data-assignment] td.status").text
        full_shot(d, shots / "home.png")
        d.find_element(By.ID, "logout").click()
        wait_for(lambda: d.find_element(By.ID, "login"), what="the login page")
        full_shot(d, shots / "login.png")
        login(d, base, "lena")
        d.get(f"{base}/lead")
        acc = d.find_element(By.CSS_SELECTOR, "#rates tr[data-user='alice'] td.acceptance").text
        assert acc == "67%", acc  # two of three steps accepted
        full_shot(d, shots / "lead.png")
        assert not page_errors(d)
    assert sorted(decisions) == ["accepted", "accepted", "overridden"]
    assert live.env.verify().passed

    eps = b.lake.read("episodes", ["episode_id", "source", "annotator", "round", "steps"]).to_pylist()
    assert len(eps) == 1 and eps[0]["source"] == "interactive" and eps[0]["annotator"].startswith("anon-")
    assert [s["decision"] for s in eps[0]["steps"]] == decisions
    pairs = b.lake.read("preference_pairs").to_pylist()
    over = decisions.index("overridden")
    assert len(pairs) == len(live.steps[over].proposals) and {p["step_index"] for p in pairs} == {over}
    assert all(p["chosen"] != p["rejected"] for p in pairs)
    assert (b.landing / "annotations" / f"{sid}.json").is_file()

    r = CliRunner().invoke(app, ["route", "--round", "0", "--lake", str(b.lake.uri)])
    assert r.exit_code == 0, r.output
    assert "interactive" in r.output
    routed = b.lake.read("sft", ["episode_id"]).num_rows + b.lake.read("ct", ["episode_id"]).num_rows
    assert routed == 1
