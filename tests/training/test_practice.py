"""The practice checklist (training/practice.py) item by item, and RL alone on a tiny two-button environment:
from near 0 to near 1, which a flipped policy-gradient sign would turn into exactly 0."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from schemas.records import Episode, Step
from tests.training.fakes import task as button_task
from training.config import OptimConfig, RLConfig, SFTConfig
from training.practice import (
    Curriculum,
    ReplayBuffer,
    clip_fractions,
    drop_stale,
    fix_groups,
    known_good_reward,
    learnable,
    token_entropy,
)
from training.rollout import StepRecord, TaskInfo, Trajectory


def _traj(task_id: str, passed: bool, step: int = 0, reward: float | None = None) -> Trajectory:
    info = TaskInfo(task_id, "do it", "f", 1, 2, make_env=lambda: None)  # type: ignore[arg-type,return-value]
    tr = Trajectory(info, 0, "v", policy_step=step, passed=passed, reward=reward)
    tr.steps.append(StepRecord("obs", [1, 2], [3, 4], [-0.1, -0.2], "t", "", "a", True))
    return tr


# ------------------------------------------------------------------ the known-good episode
def test_a_known_good_episode_scores_one_and_a_wrong_one_does_not() -> None:
    from training.rewards import verifier_reward

    t = button_task(5)
    env = t.make_env()
    good = [a for _, a in env.expert()]  # type: ignore[attr-defined]
    r, tr = known_good_reward(t, good, verifier_reward())
    assert r == 1.0 and tr.passed
    r_bad, _ = known_good_reward(t, ["click(point='<point>1 1</point>')"], verifier_reward())
    assert r_bad == 0.0


def test_rl_refuses_to_train_when_the_known_good_episode_does_not_score_one(tiny_policy) -> None:
    from training.rl import train_rl

    t = button_task(5)
    with pytest.raises(RuntimeError, match="known-good"):
        train_rl(tiny_policy, lambda n, s: [t], lambda trajs: [0.0] * len(trajs), RLConfig(iterations=1),
                 known_good=(t, ["click(point='<point>1 1</point>')"]))  # fmt: skip


# ------------------------------------------------------------------ the curriculum
def test_learnable_keeps_only_tasks_with_a_pass_rate_strictly_between_0_and_1() -> None:
    assert sorted(learnable({"a": 0.0, "b": 0.25, "c": 1.0, "d": 0.5, "e": 0.999})) == ["b", "d", "e"]


def test_curriculum_prefers_learnable_tasks_retires_mastered_ones_and_refills_the_pool() -> None:
    made: list[str] = []

    def tasks_fn(n: int, seed: int) -> list[TaskInfo]:
        out = [TaskInfo(f"t{seed}-{i}", "x", "f", 1, 2, make_env=lambda: None) for i in range(n)]  # type: ignore[arg-type,return-value]
        made.extend(t.task_id for t in out)
        return out

    cur = Curriculum(tasks_fn, pool_size=8, explore=0.0)
    ids = list(cur.pool)
    trajs = [_traj(ids[0], True), _traj(ids[0], True)]  # mastered
    trajs += [_traj(ids[1], True), _traj(ids[1], False)]  # learnable
    trajs += [_traj(ids[2], False), _traj(ids[2], False)]  # failed
    info = cur.update(trajs)
    assert ids[0] not in cur.pool and len(cur.pool) == 8 and info["retired"] == 1.0  # refilled with a fresh task
    assert cur.rates[ids[1]] == 0.5 and info["pool_learnable"] == 1.0
    pick = [t.task_id for t in cur.select(2, random.Random(0))]
    assert pick[0] == ids[1]  # the learnable task first
    assert ids[2] not in pick  # unseen tasks before failed ones
    # with nothing unseen left, failed tasks fill the batch, mastered ones never come back
    cur.update([_traj(t, False) for t in cur.pool if t not in (ids[1], ids[2])])
    pick = {t.task_id for t in cur.select(8, random.Random(0))}
    assert ids[1] in pick and ids[2] in pick and ids[0] not in pick


# ------------------------------------------------------------------ all-equal groups and the replay buffer
def test_all_equal_groups_are_kept_dropped_or_rescued_as_configured() -> None:
    trajs = [_traj("mixed", True), _traj("mixed", False), _traj("lost", False), _traj("lost", False),
             _traj("won", True), _traj("won", True)]  # fmt: skip
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    t, r, info = fix_groups(trajs, rewards, "keep")
    assert len(t) == 6 and info["all_equal_share"] == pytest.approx(2 / 3)
    t, r, info = fix_groups(trajs, rewards, "drop")
    assert [x.task.task_id for x in t] == ["mixed", "mixed"] and info["dropped"] == 2.0
    buf = ReplayBuffer()
    old = _traj("lost", True, reward=1.0)
    buf.add([old, _traj("lost", False)])
    t, r, info = fix_groups(trajs, rewards, "replay", buf)
    assert info["rescued"] == 1.0 and info["dropped"] == 1.0  # the all-won group has nothing to rescue it
    lost = [(x, y) for x, y in zip(t, r) if x.task.task_id == "lost"]
    assert len(lost) == 2 and lost[-1] == (old, 1.0) and lost[0][1] == 0.0  # one failure made way for the success
    with pytest.raises(ValueError, match="keep, drop or replay"):
        fix_groups(trajs, rewards, "rescue")


def test_the_replay_buffer_keeps_the_latest_success_per_task() -> None:
    buf = ReplayBuffer()
    first, second = _traj("a", True, step=1), _traj("a", True, step=3)
    buf.add([first, _traj("b", False)])
    buf.add([second, _traj("a", False, step=4)])  # a later failure does not replace the success
    assert buf.get("a") is second and buf.get("b") is None


def test_episodes_older_than_the_lag_are_dropped_and_every_age_is_reported() -> None:
    trajs = [_traj("a", True, step=s) for s in (5, 4, 3, 1)]
    kept, rewards, ages = drop_stale(trajs, [1.0, 2.0, 3.0, 4.0], version=5, max_lag=2)
    assert ages == [0, 1, 2, 4] and [x.policy_step for x in kept] == [5, 4, 3] and rewards == [1.0, 2.0, 3.0]


# ------------------------------------------------------------------ what the curves show
def test_clip_fractions_match_a_hand_count() -> None:
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.3, 1.5, 0.7, 1.4, 1.1])
    adv = torch.tensor([-1.0, -1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0])
    # low side: adv < 0 and ratio < 0.8 -> index 0 only (index 5 has adv > 0, index 6 ratio > 1)
    # high side: adv > 0 and ratio > 1.28 -> indexes 3 and 4
    assert clip_fractions(ratio, adv, 0.2, 0.28) == (1 / 8, 2 / 8)


def test_token_entropy_matches_hand_computed_values() -> None:
    uniform = torch.zeros(3, 4)
    assert float(token_entropy(uniform)) == pytest.approx(torch.log(torch.tensor(4.0)).item())
    p = torch.tensor([0.7, 0.2, 0.1])
    want = -(p * p.log()).sum().item()
    assert float(token_entropy(p.log()[None])) == pytest.approx(want, rel=1e-5)


# ------------------------------------------------------------------ RL alone on a tiny environment
YES, NO = "click(point='<point>60 100</point>')", "click(point='<point>200 100</point>')"


class TwoButtons:
    """Two buttons; the task is passed by clicking Yes. One step."""

    def __init__(self) -> None:
        self.clicked: str | None = None

    SCREEN = 'window "App" 320x240\nbutton "Yes" at (60, 100)\nbutton "No" at (200, 100)'

    def reset(self) -> str:
        self.clicked = None
        return self.SCREEN

    def step(self, action: str) -> tuple[str, bool, str | None]:
        self.clicked = "yes" if action.strip() == YES else "other"
        return self.SCREEN, True, "finished"

    def verify(self) -> tuple[bool, str]:
        return (self.clicked == "yes", "ok" if self.clicked == "yes" else "wrong_click")


def two_button_tasks(n: int, seed: int) -> list[TaskInfo]:
    return [TaskInfo(f"two-{seed}-{i}", "Click the right button", "two", 1, 1, make_env=TwoButtons,
                     screen_width=320, screen_height=240) for i in range(n)]  # fmt: skip


def _biased_policy(tiny_policy, share_yes: float):
    """The tiny policy taught by SFT to click No most of the time: it rarely passes before practice."""
    from training.data import encode_all, episode_examples
    from training.sft import train_sft

    env = TwoButtons()
    obs = env.reset()
    rng = random.Random(0)
    eps = []
    for i in range(300):
        yes = rng.random() < share_yes
        step = Step(
            index=0, action=YES if yes else NO, thought="I click Yes." if yes else "I click No.", observation=obs
        )
        eps.append(Episode(session_id=f"two-{i}", source="rollout", task_id=f"two-{i}",
                           instruction="Click the right button", steps=(step,), round=0, task_family="two",
                           difficulty=1, group="expert", env_passed=yes, outcome="finished"))  # fmt: skip
    items = encode_all(tiny_policy.tokenizer, [x for e in eps for x in episode_examples(e.to_row())])
    train_sft(tiny_policy, items, SFTConfig(steps=250, batch_size=32, optim=OptimConfig(lr=3e-3, warmup_steps=10)))
    return tiny_policy


def _pass_rate(policy, n: int = 64) -> float:
    from training.rollout import run_episodes

    trajs = run_episodes(policy.model, policy.tokenizer, two_button_tasks(n, 99), temperature=1.0, seed=7)
    return sum(t.passed for t in trajs) / len(trajs)


def _reward(trajs) -> list[float]:
    return [1.0 if t.passed else 0.0 for t in trajs]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_rl_alone_takes_a_tiny_env_from_near_0_to_near_1_and_a_flipped_sign_does_not(
    tiny_policy, algo: str, sign: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.rl as rl

    pol = _biased_policy(tiny_policy, share_yes=0.1)
    before = _pass_rate(pol)
    assert 0.0 < before <= 0.25
    if sign < 0:  # the advantage's sign flipped: the policy gradient pushes away from the passes
        real = rl.build_sequences

        def flipped(*a, **k):
            seqs, info = real(*a, **k)
            for s in seqs:
                s.adv = -s.adv
            return seqs, info

        monkeypatch.setattr(rl, "build_sequences", flipped)
    cfg = RLConfig(algo=algo, iterations=24, tasks_per_iter=8, group_size=8, ppo_epochs=2, minibatch_size=32, negative_weight=1.0,
                   value_pretrain_steps=5, optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip
    _, info = rl.train_rl(pol, two_button_tasks, _reward, cfg, max_new_tokens=40)
    after = _pass_rate(pol)
    hist = info["iterations"]
    assert all("entropy" in h and "all_equal_share" in h for h in hist if h["updates"])
    if sign > 0:
        assert after >= 0.8, (before, after, [h["pass_rate"] for h in hist])
    else:
        assert after <= 0.05, (before, after, [h["pass_rate"] for h in hist])


def test_rl_metrics_are_recorded_per_iteration(tiny_policy) -> None:
    from training.rl import train_rl

    pol = _biased_policy(tiny_policy, share_yes=0.5)
    cfg = replace(RLConfig(), iterations=2, tasks_per_iter=4, group_size=4, minibatch_size=16, value_pretrain_steps=2)
    _, info = train_rl(pol, two_button_tasks, _reward, cfg, max_new_tokens=40)
    h = info["iterations"][0]
    for k in ("reward_mean", "pass_rate", "entropy", "clip_low", "clip_high", "kl", "value_loss", "all_equal_share",
              "age_mean", "steps_per_episode", "gen_tokens_per_s", "pool_learnable"):  # fmt: skip
        assert k in h and h[k] is not None, k
    assert h["kl"] >= 0.0 and 0.0 <= h["clip_low"] <= 1.0 and h["gen_tokens_per_s"] > 0


def test_curriculum_spreads_its_picks_over_groups() -> None:
    def tasks_fn(n: int, seed: int) -> list[TaskInfo]:
        return [TaskInfo(f"t{seed}-{i}", "x", "f", 1 + (i % 4 == 0), 2, make_env=lambda: None) for i in range(n)]  # type: ignore[arg-type,return-value]

    flat = Curriculum(tasks_fn, pool_size=16, explore=1.0)
    spread = Curriculum(tasks_fn, pool_size=16, explore=1.0, group=lambda t: t.level)
    assert sum(t.level == 2 for t in spread.select(4, random.Random(1))) == 2  # level 2 is a quarter of the pool
    assert sum(t.level == 2 for t in flat.select(16, random.Random(1))) == 4


def test_corrections_keep_the_newest_and_rehearsal_batches_mix_them_in_at_their_share() -> None:
    from training.practice import Corrections, rehearsal_batches
    from training.prompt import Encoded

    corr = Corrections(max_size=3)
    corr.add([([1, 2], [7 + i]) for i in range(5)])
    assert corr.added == 5 and [e.input_ids[-1] for e in corr.items] == [9, 10, 11]
    assert all(e.mask == [0, 0, 1] for e in corr.items)  # the loss on the answer only
    copying = [Encoded([5, 5, 5, 5], [0, 0, 1, 1])]
    b = next(rehearsal_batches(copying, corr, batch_size=4, share=0.5, pad_id=0, seed=0))
    rows = b.input_ids.tolist()
    assert sum(r[:4] == [5, 5, 5, 5] for r in rows) == 2 and sum(r[2] in (9, 10, 11) for r in rows) == 2
    # nothing found yet: all copying; no copying data: all corrections; neither: no batches
    assert next(rehearsal_batches(copying, Corrections(), 4, 0.5, 0, 0)).input_ids.shape[0] == 4
    assert next(rehearsal_batches([], corr, 4, 0.5, 0, 0)).input_ids.shape[0] == 3
    assert next(rehearsal_batches([], Corrections(), 4, 0.5, 0, 0)) is None
