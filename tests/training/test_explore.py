"""Exploration by the screen (training/explore.py, `RLConfig.explore`): the actions a text screen offers, their
coverage of the sandbox's right actions, and expert iteration on a task whose right button the policy never samples
(it learns it only through the search; without the search it stays at 0)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.training.test_practice import _biased_policy, _reward, two_button_tasks
from training.config import OptimConfig, RLConfig
from training.explore import screen_actions

SCREEN = """window "Files" 640x400
checkbox "Newsletter" unchecked (375,48)
textbox "Company" value="" focused (216,48)
list "Files" rows 1-6 of 9 (320,166)
listitem "agenda_2021.csv" (320,82)
text "Owner" value="Yara Kowalski" (428,48)
page more below
status "Ready\""""


def test_the_screen_offers_a_click_per_element_scrolls_the_quoted_texts_the_values_and_the_keys() -> None:
    acts = screen_actions(SCREEN, "Enter Company 'Wayne' and press 'Submit'.")
    clicks = [a for a in acts if a.startswith("click(")]
    assert clicks == [f"click(point='<point>{p}</point>')" for p in ("375 48", "216 48", "320 166", "320 82", "428 48")]
    assert "scroll(point='<point>320 166</point>', direction='down')" in acts  # the list
    assert "scroll(point='<point>320 200</point>', direction='up')" in acts  # the page, at the window's centre
    assert "type(content='Wayne')" in acts and "type(content='Submit')" in acts
    assert "finished(content='Yara Kowalski')" in acts and "finished(content='')" not in acts
    assert "hotkey(key='escape')" in acts and "hotkey(key='ctrl a')" in acts
    assert len(acts) == len(set(acts))
    assert screen_actions(None, "x") == [] and screen_actions("", "x") == []


def test_at_every_state_of_the_sandbox_s_levels_1_to_4_some_offered_action_makes_progress() -> None:
    """The search only helps if the right action is among those offered: walk each task by the first offered action
    that makes progress, from its first screen to a pass."""
    from training.branch import progress_reward
    from training.envs import training_tasks

    tasks = [t for t in training_tasks(120, 100_000) if t.level <= 4]
    assert {t.family for t in tasks} >= {"click_button", "fill_form", "checkboxes", "menu_path", "scroll_find",
                                         "popup", "answer"}  # fmt: skip
    for t in tasks:
        env = t.make_env()
        obs, done = env.reset(), False
        for _ in range(t.step_limit):
            before = env.steps_to_go()
            for a in screen_actions(obs, t.instruction):
                c = env.clone()
                _, d, _ = c.step(a)
                if progress_reward(before, c, d, True) > 0:
                    break
            else:
                pytest.fail(f"{t.family} level {t.level}: no offered action makes progress on\n{obs}")
            obs, done, _ = env.step(a)
            if done:
                break
        assert done and env.verify()[0], (t.task_id, t.instruction)


class ThreeButtons:
    """One step: three buttons in the sandbox's screen format; the task passes by clicking "Go"."""

    SCREEN = 'window "App" 320x240\nbutton "Stop" (60,100)\nbutton "Wait" (200,100)\nbutton "Go" (140,160)'
    GO = "click(point='<point>140 160</point>')"

    def __init__(self) -> None:
        self.clicked: str | None = None

    def reset(self) -> str:
        self.clicked = None
        return self.SCREEN

    def step(self, action: str) -> tuple[str, bool, str | None]:
        self.clicked = "go" if action.strip() == self.GO else "other"
        return self.SCREEN, True, "finished"

    def verify(self) -> tuple[bool, str]:
        return (self.clicked == "go", "ok" if self.clicked == "go" else "wrong_click")

    def clone(self) -> ThreeButtons:
        c = ThreeButtons()
        c.clicked = self.clicked
        return c

    def steps_to_go(self) -> int | None:
        return 1 if self.clicked is None else (0 if self.clicked == "go" else None)


def three_button_tasks(n: int, seed: int):
    return [replace(t, make_env=ThreeButtons) for t in two_button_tasks(n, seed)]


def _go_rate(policy, n: int = 48) -> float:
    from training.rollout import run_episodes

    trajs = run_episodes(policy.model, policy.tokenizer, three_button_tasks(n, 99), temperature=1.0, seed=7)
    return sum(t.passed for t in trajs) / len(trajs)


@pytest.mark.slow
@pytest.mark.parametrize("explore", [True, False])
def test_searching_the_screen_teaches_a_button_the_policy_never_samples_and_sampling_alone_does_not(
    tiny_policy, explore: bool
) -> None:
    import training.rl as rl

    pol = _biased_policy(tiny_policy, share_yes=0.0)  # taught to click (200,100) only: "Wait" here, never "Go"
    assert _go_rate(pol) == 0.0
    cfg = RLConfig(groups="step", step_reward="progress", explore=explore, iterations=6, tasks_per_iter=4,
                   group_size=4, minibatch_size=16, self_imitation=1.0, rehearsal_coef=0.0, rehearsal_steps=10,
                   optim=OptimConfig(lr=3e-3, warmup_steps=0))  # fmt: skip
    _, info = rl.train_rl(pol, three_button_tasks, _reward, cfg, max_new_tokens=40)
    hist = info["iterations"]
    after = _go_rate(pol)
    if explore:
        assert sum(h["explored_found"] for h in hist) > 0 and sum(h["rehearsal_steps"] for h in hist) > 0
        assert after >= 0.8, (after, hist)
    else:  # nothing sampled ever finds "Go", so there is nothing to imitate
        assert sum(h["corrections"] for h in hist) == 0
        assert after == 0.0


def test_exploring_without_self_imitation_is_refused_before_training(tiny_policy) -> None:
    import training.rl as rl

    with pytest.raises(ValueError, match="self_imitation"):
        rl.train_rl(tiny_policy, three_button_tasks, _reward, RLConfig(groups="step", explore=True, iterations=1),
                    max_new_tokens=8)  # fmt: skip


@pytest.mark.parametrize("keep", ["best", "all"])
def test_where_several_searched_actions_make_progress_best_keeps_the_policy_s_likeliest_and_all_keeps_them_all(
    tiny_policy, keep: str
) -> None:
    from flows.config import tuned_flywheel
    from training.branch import answer_logprobs, step_groups, verified
    from training.envs import training_tasks

    task = next(t for t in training_tasks(200, 100_000) if t.family == "checkboxes" and t.level >= 3)
    cands, _, stats = step_groups(tiny_policy.model, tiny_policy.tokenizer, [task], group_size=0, temperature=1.0,
                                  max_new_tokens=8, prompt_cfg=tuned_flywheel().prompt, policy_version="v", seed=0,
                                  at="all", explore=True, explore_keep=keep)  # fmt: skip
    first = [c for c in cands if c.state == 0 and c.explored]
    good = [c for c in first if verified(c)]
    assert all(c.logprobs == [] for c in first) and stats["explored_found"] >= 1
    if keep == "all":  # the first screen: every box the instruction names that is not checked yet is progress
        assert len(good) >= 2 and all(c.action.startswith("click(") for c in good)
        lps = answer_logprobs(tiny_policy.model, good[0].prompt_ids, good)
        alone = [answer_logprobs(tiny_policy.model, c.prompt_ids, [c])[0] for c in good]
        assert lps == pytest.approx(alone, abs=1e-3)  # batching (padding) changes no candidate's score
    else:
        assert len(good) == 1
    with pytest.raises(ValueError, match="explore_keep"):
        step_groups(tiny_policy.model, tiny_policy.tokenizer, [task], group_size=0, temperature=1.0, max_new_tokens=8,
                    prompt_cfg=tuned_flywheel().prompt, policy_version="v", seed=0, explore=True, explore_keep="some")  # fmt: skip
