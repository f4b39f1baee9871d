"""Step-level groups (training/branch.py): the sandbox's progress signal, the shaped reward, per-state advantages,
and RL with step groups on the two-button environment (near 0 to near 1; a flipped sign goes to 0)."""

from __future__ import annotations

import pytest

from schemas.prompt import PromptConfig
from tests.training.test_practice import YES, TwoButtons, _biased_policy, _pass_rate, _reward, two_button_tasks
from training.base import BASE_MODEL
from training.branch import Candidate, progress_reward, step_advantages
from training.config import OptimConfig, RLConfig
from training.envs import training_tasks


def _expert_actions(info) -> list[str]:
    from sandbox.demonstrators import Expert
    from sandbox.rollout import run_attempt

    a = run_attempt(info.payload, Expert())
    assert a.passed
    return [s.action for s in a.steps]


@pytest.mark.parametrize("family", ["fill_form", "menu_path", "answer", "popup"])
def test_steps_to_go_is_the_expert_path_and_falls_by_one_per_expert_step(family: str) -> None:
    info = training_tasks(1, 5, families=[family], levels=[3])[0]
    actions = _expert_actions(info)
    env = info.make_env()
    env.reset()
    assert env.steps_to_go() == len(actions)
    for k, a in enumerate(actions[:-1]):
        before = env.clone()
        _, done, _ = env.step(a)
        assert not done and env.steps_to_go() == len(actions) - k - 1
        assert progress_reward(before.steps_to_go(), env, done, True) == 1.0
    # the clone is independent: stepping it leaves the original where it was
    c = env.clone()
    c.step(actions[-1])
    assert env.steps_to_go() == 1


def test_a_wrong_end_an_unreadable_action_and_a_no_op_score_minus_one_minus_one_and_zero() -> None:
    info = training_tasks(1, 3, families=["click_button"], levels=[2])[0]
    env = info.make_env()
    env.reset()
    d = env.steps_to_go()
    wrong = env.clone()
    _, done, _ = wrong.step("finished(content='done')")
    assert done and progress_reward(d, wrong, done, True) == -1.0
    assert progress_reward(d, env, False, False) == -1.0
    noop = env.clone()
    _, done, _ = noop.step("click(point='<point>2 2</point>')")  # the window's corner: nothing there
    assert not done and progress_reward(d, noop, done, True) == 0.0


def test_step_advantages_are_group_relative_per_state_and_all_equal_states_are_dropped() -> None:
    def c(state: int, r: float) -> Candidate:
        return Candidate(state, [1], [2], [-0.1], r)

    cands = [c(0, 1.0), c(0, -1.0), c(0, 1.0), c(0, -1.0), c(1, 1.0), c(1, 1.0), c(2, 0.0), c(2, 1.0)]
    kept, adv, equal = step_advantages(cands)
    assert [k.state for k in kept] == [0, 0, 0, 0, 2, 2]
    assert adv == pytest.approx([1.0, -1.0, 1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert equal == pytest.approx(1 / 3)


class SteppedTwoButtons(TwoButtons):
    """The two-button task with the progress signal: one step to go until a button is clicked."""

    def clone(self) -> SteppedTwoButtons:
        c = SteppedTwoButtons()
        c.clicked = self.clicked
        return c

    def steps_to_go(self) -> int | None:
        return 1 if self.clicked is None else (0 if self.clicked == "yes" else None)


def stepped_tasks(n: int, seed: int):
    from dataclasses import replace

    return [replace(t, make_env=SteppedTwoButtons) for t in two_button_tasks(n, seed)]


@pytest.mark.slow
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_rl_with_step_groups_takes_the_tiny_env_from_near_0_to_near_1_and_a_flipped_sign_does_not(
    tiny_policy, sign: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.rl as rl

    assert YES  # the action the SFT bias rarely takes
    pol = _biased_policy(tiny_policy, share_yes=0.1)
    before = _pass_rate(pol)
    assert 0.0 < before <= 0.25
    if sign < 0:
        real = rl.step_advantages
        monkeypatch.setattr(
            rl, "step_advantages", lambda *a, **k: (lambda r: (r[0], [-x for x in r[1]], r[2]))(real(*a, **k))
        )
    cfg = RLConfig(groups="step", iterations=30, tasks_per_iter=8, group_size=8, ppo_epochs=2, minibatch_size=32,
                   negative_weight=1.0,
                   rehearsal_coef=0.0, optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    _, info = rl.train_rl(pol, stepped_tasks, _reward, cfg, max_new_tokens=40)
    after = _pass_rate(pol)
    hist = info["iterations"]
    assert all("states" in h and "all_equal_share" in h for h in hist)
    if sign > 0:
        assert after >= 0.8, (before, after, [h["pass_rate"] for h in hist])
    else:
        assert after <= 0.05, (before, after, [h["pass_rate"] for h in hist])


def test_action_credit_starts_after_the_action_marker() -> None:
    from training.model import Policy
    from training.rl import action_start

    tok = Policy.load(BASE_MODEL).tokenizer
    ids = tok("Thought: the Save button\nAction: click(point='<point>10 20</point>')", add_special_tokens=False)[
        "input_ids"
    ]
    marker = tok("\nAction:", add_special_tokens=False)["input_ids"]
    k = action_start(ids, marker)
    assert tok.decode(ids[k:]).strip().startswith("click(") and "Save" in tok.decode(ids[:k])
    assert action_start(ids, []) == 0 and action_start(ids[:3], marker) == 0


def test_step_groups_refuse_an_environment_without_a_progress_signal_in_one_line(tiny_policy) -> None:
    from training.branch import step_groups

    with pytest.raises(ValueError, match="steps_to_go"):
        step_groups(tiny_policy.model, tiny_policy.tokenizer, two_button_tasks(2, 0), group_size=2, temperature=1.0,
                    max_new_tokens=8, prompt_cfg=PromptConfig(), policy_version="v", seed=0)  # fmt: skip


@pytest.mark.parametrize("bad", [{"groups": "steps"}, {"credit": "thought"}])
def test_an_unknown_group_or_credit_setting_is_refused_before_training(tiny_policy, bad: dict) -> None:
    import training.rl as rl

    with pytest.raises(ValueError, match="RLConfig"):
        rl.train_rl(tiny_policy, stepped_tasks, _reward, RLConfig(iterations=1, **bad), max_new_tokens=8)


def test_a_thought_is_consistent_only_when_it_names_what_the_action_reaches() -> None:
    from schemas.prompt import consistent

    obs = 'window "App" 320x240\nbutton "Save" (10,20)\nbutton "Cancel" (50,20)'
    line, click = PromptConfig(thought_style="line"), "click(point='<point>10 20</point>')"
    assert consistent('button "Save" (10,20)', click, line, obs, None)
    assert not consistent('button "Cancel" (50,20)', click, line, obs, None)  # a lucky click under another's name
    assert not consistent("I save", click, line, obs, None)
    assert consistent("I save", click, PromptConfig(thought_style="expert"), obs, None)  # free-form thoughts: any


def test_progress_reward_is_one_only_for_progress_with_a_consistent_thought() -> None:
    from training.branch import progress_only

    cands = [Candidate(0, [1], [2], [-0.1], r, ok) for r, ok in ((1.0, True), (1.0, False), (0.0, True), (-1.0, True))]
    assert [c.reward for c in progress_only(cands)] == [1.0, 0.0, 0.0, 0.0]
    assert [c.reward for c in cands] == [1.0, 1.0, 0.0, -1.0]  # the candidates themselves are left as they were


def test_a_loop_repeating_one_action_is_branched_once() -> None:
    from training.branch import first_visits
    from training.rollout import StepRecord, Trajectory

    task = two_button_tasks(1, 0)[0]
    tr = Trajectory(task, 0, "v")
    for obs, act in (("A", "x"), ("B", "y"), ("B", "y"), ("B", "y"), ("C", "z")):
        tr.steps.append(StepRecord(obs, [], [], [], "", "", act, True))
    seen: set = set()
    # steps 2 and 3 show screen B after action y, as step 2 did: one lesson; step 1 saw B after x: another
    assert first_visits(tr, [0, 1, 2, 3, 4], seen) == [0, 1, 2, 4]
    assert first_visits(tr, [2, 3], seen) == []  # a second attempt at the same task meets the same situations


@pytest.mark.slow
def test_step_groups_with_the_progress_reward_keep_verified_corrections_for_self_imitation(tiny_policy) -> None:
    import training.rl as rl

    pol = _biased_policy(tiny_policy, share_yes=0.3)
    cfg = RLConfig(groups="step", iterations=3, tasks_per_iter=8, group_size=8, ppo_epochs=1, minibatch_size=16,
                   step_reward="progress", self_imitation=0.5, corrections_max=5, rehearsal_coef=0.0,
                   optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    _, info = rl.train_rl(pol, stepped_tasks, _reward, cfg, max_new_tokens=40)
    hist = info["iterations"]
    assert all(0.0 < h["consistent_share"] <= 1.0 for h in hist)  # free-form thoughts: only unreadable ones are not
    assert sum(h["corrections"] for h in hist) > 0
    assert 0 < hist[-1]["corrections_kept"] <= 5  # the newest corrections_max only
    with pytest.raises(ValueError, match="step_reward"):
        rl.train_rl(pol, stepped_tasks, _reward, RLConfig(groups="step", algo="grpo", iterations=1,
                                                          step_reward="gain"), max_new_tokens=8)  # fmt: skip
