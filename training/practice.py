"""The practice checklist of RL (training/rl.py), one plain function or small class per item, each tested.

- `known_good_reward`: a known-good episode is run through the environment and the reward before training (it
  must score 1, or the reward or the environment is broken and practice would learn nothing);
- `Curriculum`: practice stays where the policy sometimes wins (0 < pass rate < 1 on its latest group), follows the
  policy as it improves (mastered tasks retire, fresh ones join), and probes unseen tasks;
- `ReplayBuffer` + `fix_groups`: groups whose attempts all scored the same carry no group-relative signal; they
  are dropped, or an all-failed group is rescued with the task's latest success (ARPO's replay);
- `drop_stale`: an episode written by a policy more than `max_lag` updates old is dropped, and every age is kept;
- `clip_fractions` and `token_entropy`: what a person reads on the training curves to tell "exploring and
  winning" from "falling apart";
- `Corrections` + `rehearsal_batches`: self-imitation, the verified good actions practice found at the policy's
  mistakes replayed beside the copying data.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from training.data import Batch, collate
from training.prompt import Encoded
from training.rollout import StepRecord, TaskInfo, Trajectory, final_answer

#: The verifier's reward per trajectory, batched (training/rewards.py makes one from the validators).
RewardFn = Callable[[Sequence[Trajectory]], list[float]]


# ------------------------------------------------------------------ 1. the reward works before we train on it
def known_good_reward(task: TaskInfo, actions: Sequence[str], reward: RewardFn) -> tuple[float, Trajectory]:
    """Play `actions` (a known-good solution) in a fresh environment of `task` and score the episode with `reward`.

    The trajectory has no tokens (it is scored, not trained on)."""
    env = task.make_env()
    tr = Trajectory(task, 0, "known-good")
    try:
        obs = env.reset()
        for a in actions:
            tr.steps.append(StepRecord(obs, [], [], [], "", "", a, True))
            obs, done, term = env.step(a)
            if done:
                tr.termination = term or "finished"
                break
        tr.passed, tr.reason = env.verify()
        tr.final_answer = final_answer(actions[-1]) if actions else None
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    return float(reward([tr])[0]), tr


# ------------------------------------------------------------------ 2. a curriculum that follows the policy
def learnable(rates: dict[str, float]) -> list[str]:
    """The tasks whose latest group was neither all passes nor all failures (0 < pass rate < 1)."""
    return [t for t, p in rates.items() if 0.0 < p < 1.0]


@dataclass
class Curriculum:
    """A pool of training tasks with each task's latest group pass rate.

    `select(n)` takes learnable tasks first (0 < p < 1), then unseen ones (to find new learnable tasks), then,
    only to fill the batch, failed ones (p = 0, they may become learnable as the policy improves). Mastered tasks
    (p = 1) leave the pool and fresh tasks from `tasks_fn` replace them, so the pool follows the policy."""

    tasks_fn: Callable[[int, int], Sequence[TaskInfo]]
    pool_size: int
    seed: int = 0
    explore: float = 0.25  # at least this share of a batch goes to unseen tasks while there are any
    #: Spread each kind of pick round-robin over these groups (a task's level, say), so practice on the easy
    #: groups, where wins come first, does not crowd out the harder ones; None: no spreading.
    group: Callable[[TaskInfo], object] | None = None
    #: A task leaves the pool after this many groups (None: only when mastered). Practising the same few instances
    #: over and over fits their coordinates rather than the skill (docs/training.md, "Practice").
    max_visits: int | None = None
    visits: dict[str, int] = field(default_factory=dict)
    pool: dict[str, TaskInfo] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    retired: int = 0
    _draws: int = 0

    def __post_init__(self) -> None:
        self._refill()

    def _refill(self) -> None:
        """Top the pool up from a full-size draw, picked at random: a backend's first tasks of a draw may all be of
        one kind (the sandbox cycles level 1 first), so asking only for the few missing would skew the pool."""
        while len(self.pool) < self.pool_size:
            fresh = list(self.tasks_fn(self.pool_size, self.seed + 7919 * self._draws))
            random.Random(self.seed + self._draws).shuffle(fresh)
            self._draws += 1
            new = [t for t in fresh if t.task_id not in self.pool and t.task_id not in self.rates]
            if not new:
                break
            self.pool.update((t.task_id, t) for t in new[: self.pool_size - len(self.pool)])

    def _spread(self, ids: list[str]) -> list[str]:
        if self.group is None:
            return ids
        by: dict[object, list[str]] = {}
        for t in ids:
            by.setdefault(self.group(self.pool[t]), []).append(t)
        lanes = list(by.values())
        return [lane[i] for i in range(max(map(len, lanes), default=0)) for lane in lanes if i < len(lane)]

    def select(self, n: int, rng: random.Random) -> list[TaskInfo]:
        ids = list(self.pool)
        rng.shuffle(ids)
        good = self._spread([t for t in ids if t in self.rates and 0.0 < self.rates[t] < 1.0])
        unseen = self._spread([t for t in ids if t not in self.rates])
        failed = self._spread([t for t in ids if self.rates.get(t) == 0.0])
        k_new = min(len(unseen), max(int(round(self.explore * n)), n - len(good)))
        pick = good[: n - k_new] + unseen[:k_new]
        pick += failed[: n - len(pick)]
        return [self.pool[t] for t in pick]

    def update(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Record each task's group pass rate; retire mastered tasks and refill the pool."""
        by: dict[str, list[bool]] = {}
        for tr in trajs:
            by.setdefault(tr.task.task_id, []).append(tr.passed)
        for t, v in by.items():
            self.rates[t] = sum(v) / len(v)
            self.visits[t] = self.visits.get(t, 0) + 1
            spent = self.max_visits is not None and self.visits[t] >= self.max_visits
            if (self.rates[t] == 1.0 or spent) and t in self.pool:
                del self.pool[t]
                self.retired += 1
        self._refill()
        seen = {t: self.rates[t] for t in self.pool if t in self.rates}
        return {
            "pool_learnable": float(len(learnable(seen))),
            "pool_seen": float(len(seen)),
            "retired": float(self.retired),
        }


# ------------------------------------------------------------------ 3. all-equal groups: drop or rescue
@dataclass
class ReplayBuffer:
    """The latest successful trajectory of each task (ARPO): it rescues a later group in which every attempt failed."""

    best: dict[str, Trajectory] = field(default_factory=dict)

    def add(self, trajs: Sequence[Trajectory]) -> None:
        for tr in trajs:
            if tr.passed and tr.n_agent_tokens:
                self.best[tr.task.task_id] = tr

    def get(self, task_id: str) -> Trajectory | None:
        return self.best.get(task_id)


def fix_groups(
    trajs: Sequence[Trajectory], rewards: Sequence[float], mode: str, buffer: ReplayBuffer | None = None
) -> tuple[list[Trajectory], list[float], dict[str, float]]:
    """Groups (a task's attempts) whose outcomes are all equal (all passed or all failed): `keep` them, `drop` them,
    or `replay`: an all-failed group gets the task's latest success from `buffer` in place of one failure (other
    all-equal groups are dropped).

    Returns the kept trajectories, their rewards and {all_equal_share, dropped, rescued}."""
    if mode not in ("keep", "drop", "replay"):
        raise ValueError(f"all_equal must be keep, drop or replay, not {mode!r}")
    groups: dict[str, list[int]] = {}
    for i, tr in enumerate(trajs):
        groups.setdefault(tr.task.task_id, []).append(i)
    out_t: list[Trajectory] = []
    out_r: list[float] = []
    equal = dropped = rescued = 0
    for task_id, idx in groups.items():
        rs = [rewards[i] for i in idx]
        # equal by outcome, not by shaped reward: in a group without a win, a readable failure outscoring an
        # unreadable one (0 vs -1) would be reinforced, and practice would learn to fail politely (measured: held-out
        # 28.6% -> 15.4%, the step-limit failures of level 1 from 0 to 15; docs/training.md)
        wins = [trajs[i].passed for i in idx]
        same = len(idx) > 1 and all(w == wins[0] for w in wins)
        equal += same
        if not same or mode == "keep":
            out_t += [trajs[i] for i in idx]
            out_r += rs
            continue
        hit = buffer.get(task_id) if (mode == "replay" and buffer is not None) else None
        if hit is None or wins[0]:
            dropped += 1
            continue
        rescued += 1
        out_t += [trajs[i] for i in idx[1:]] + [hit]
        out_r += rs[1:] + [float(hit.reward if hit.reward is not None else 1.0)]
    return out_t, out_r, {"all_equal_share": equal / max(1, len(groups)), "dropped": float(dropped),
                          "rescued": float(rescued)}  # fmt: skip


# ------------------------------------------------------------------ 4. staleness
def drop_stale(
    trajs: Sequence[Trajectory], rewards: Sequence[float], version: int, max_lag: int
) -> tuple[list[Trajectory], list[float], list[int]]:
    """Keep episodes written by a policy at most `max_lag` updates older than `version`; return them, their rewards
    and the age of every episode seen (dropped ones included)."""
    ages = [version - tr.policy_step for tr in trajs]
    keep = [i for i, a in enumerate(ages) if a <= max_lag]
    return [trajs[i] for i in keep], [rewards[i] for i in keep], ages


# ------------------------------------------------------------------ 5. what the curves show
def clip_fractions(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> tuple[float, float]:
    """Shares of tokens whose gradient the clip removed: low side (adv < 0 and ratio < 1 - eps_low), high side
    (adv > 0 and ratio > 1 + eps_high)."""
    n = max(1, ratio.numel())
    low = ((adv < 0) & (ratio < 1 - eps_low)).sum().item() / n
    high = ((adv > 0) & (ratio > 1 + eps_high)).sum().item() / n
    return float(low), float(high)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the next-token distributions in `logits` (..., V)."""
    logp = torch.log_softmax(logits.float(), -1)
    return -(logp.exp() * logp).sum(-1).mean()


# ------------------------------------------------------------------ 6. self-imitation of verified corrections
@dataclass
class Corrections:
    """Self-imitation (Oh et al. 2018, ARPO's replay at the step level): the actions practice found that moved a task
    along where the greedy policy erred, with a thought that says what they do, kept (newest `max_size`) and replayed
    beside the copying data. Each was verified by the environment, so it stays a right answer for its state however
    the policy moves; replaying it turns one lucky sample into a lasting lesson."""

    max_size: int = 4096
    items: list[Encoded] = field(default_factory=list)
    added: int = 0

    def add(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
        """(prompt ids, answer ids) of verified good actions."""
        for p, a in pairs:
            self.items.append(Encoded(list(p) + list(a), [0] * len(p) + [1] * len(a)))
        self.added += len(pairs)
        del self.items[: max(0, len(self.items) - self.max_size)]


def rehearsal_batches(
    copying: Sequence[Encoded], corrections: Corrections, batch_size: int, share: float, pad_id: int, seed: int
) -> Iterator[Batch | None]:
    """Endless rehearsal batches: `share` of each batch from the corrections found so far (all of it without copying
    data), the rest from the copying data; None while there is nothing to rehearse yet."""
    rng = random.Random(seed)
    while True:
        n = len(corrections.items)
        k = min(n, round(share * batch_size) if copying else batch_size)
        rows = rng.sample(corrections.items, k) if k else []
        if copying:
            rows += [copying[rng.randrange(len(copying))] for _ in range(batch_size - k)]
        yield collate(rows, pad_id) if rows else None
