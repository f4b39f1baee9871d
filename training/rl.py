"""RL: PPO in the sandbox with the verifier's reward, with the changes of the UI-TARS-2 report (section 2.5).

- value pretraining: before the first policy update the critic is fitted, policy frozen, to Monte Carlo returns;
- decoupled GAE: the critic's targets use lambda_critic (1.0), the policy's advantages lambda_policy;
- length-adaptive GAE: lambda_policy = 1 - 1/(alpha * l), l = the trajectory's agent tokens, alpha = 0.05;
- clip-higher: the ratio is clipped to [1 - eps_low, 1 + eps_high] with eps_high > eps_low (0.2 / 0.28);
- GRPO (group-normalised outcome advantages, no critic) as an option;
- the loss is masked to the agent's tokens: observation tokens are context, never actions.

The MDP is token-level over the agent's tokens of a whole multi-step trajectory (gamma = 1): each step's response
tokens follow the previous step's, the observation tokens in between are skipped, and the reward arrives on the
last token. The loop below reads top to bottom: roll out, score, estimate advantages, update.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from schemas.prompt import PromptConfig
from training.branch import progress_only, step_advantages, verified
from training.compiled import compiled
from training.config import RLConfig, to_dict
from training.data import masked_nll, trunk_hidden
from training.jobs import finish, resolve_base, vision_items
from training.loop import lr_at, make_optimizer
from training.model import Policy
from training.packing import pack, packed_hidden
from training.practice import (
    Corrections,
    Curriculum,
    ReplayBuffer,
    RewardFn,
    clip_fractions,
    drop_stale,
    fix_groups,
    known_good_reward,
    rehearsal_batches,
    token_entropy,
)
from training.rollout import TaskInfo, Trajectory
from training.rollout_server import RolloutServer, ServedActor
from training.runs import JobResult
from training.workers import Batch, Rollouts, executor_for

TasksFn = Callable[[int, int], Sequence[TaskInfo]]  # (n, seed) -> training tasks


# ------------------------------------------------------------------ advantage estimation
def length_adaptive_lambda(length: int, alpha: float = 0.05) -> float:
    """lambda_policy = 1 - 1/(alpha * l), clamped to [0, 1] (short sequences get 0: pure one-step TD)."""
    if length <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - 1.0 / (alpha * length))))


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Generalised advantage estimates for one trajectory (the state after the last token is terminal, V = 0)."""
    T = rewards.shape[0]
    adv = torch.zeros(T)
    last = 0.0
    for t in reversed(range(T)):
        next_v = values[t + 1] if t + 1 < T else 0.0
        delta = rewards[t] + gamma * next_v - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv


def decoupled_gae(
    rewards: torch.Tensor, values: torch.Tensor, cfg: RLConfig
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(policy advantages with lambda_policy, critic targets with lambda_critic, the lambda_policy used)."""
    lam_p = length_adaptive_lambda(len(rewards), cfg.alpha) if cfg.length_adaptive else cfg.lambda_policy
    adv = gae(rewards, values, cfg.gamma, lam_p)
    returns = gae(rewards, values, cfg.gamma, cfg.lambda_critic) + values
    return adv, returns, lam_p


def group_advantages(rewards: Sequence[float], groups: Sequence[str], eps: float = 1e-6) -> list[float]:
    """GRPO: each trajectory's reward minus its group's mean, over the group's standard deviation."""
    by: dict[str, list[float]] = {}
    for r, g in zip(rewards, groups):
        by.setdefault(g, []).append(r)
    stats = {g: (sum(v) / len(v), (sum((x - sum(v) / len(v)) ** 2 for x in v) / len(v)) ** 0.5) for g, v in by.items()}
    return [(r - stats[g][0]) / (stats[g][1] + eps) for r, g in zip(rewards, groups)]


# ------------------------------------------------------------------ rewards
def shaped_rewards(trajs: Sequence[Trajectory], verifier: RewardFn, cfg: RLConfig) -> list[float]:
    """The verifier's reward; `unreadable_reward` (-1) for an unreadable action instead; plus the format reward
    for an episode whose every action parsed, minus the length penalty per step."""
    base = verifier(trajs) if trajs else []
    out = []
    for tr, v in zip(trajs, base):
        r = cfg.unreadable_reward if tr.termination == "unreadable_action" else float(v) + cfg.format_reward
        out.append(r - cfg.length_penalty * len(tr.steps))
    return out


# ------------------------------------------------------------------ batches of step sequences
@dataclass
class StepSeq:
    """One step as a training sequence: prompt + response ids; per response token the stored old log-probability,
    the advantage and the critic's target."""

    ids: list[int]
    n_prompt: int
    old_lp: torch.Tensor
    adv: torch.Tensor
    ret: torch.Tensor
    weight: float = 1.0  # each token's weight in the policy loss (loss_norm="trajectory": 1 / the trajectory's tokens)
    image: bytes | None = None  # a VLM's step: the screenshot its prompt shows (training/vision.py)


def _pad(seqs: Sequence[StepSeq], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and the response positions over the next-token positions (B, T-1)."""
    T = max(len(s.ids) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    resp = torch.zeros((len(seqs), T - 1), dtype=torch.bool)  # over next-token positions (predicting ids[:, 1:])
    for i, s in enumerate(seqs):
        ids[i, : len(s.ids)] = torch.tensor(s.ids)
        resp[i, s.n_prompt - 1 : len(s.ids) - 1] = True
    return ids, resp


def _images(seqs: Sequence[StepSeq]) -> tuple[bytes, ...] | None:
    """Each sequence's screenshot when the policy is a VLM (its steps carry one), else None."""
    return tuple(s.image for s in seqs) if seqs and seqs[0].image is not None else None  # type: ignore[misc]


def forward_policy(
    policy: Policy, ids: torch.Tensor, resp: torch.Tensor, images: Sequence[bytes] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """At the response positions `resp` (B, T-1) only, in row order: (next-token log-probs (N,), values (N,) from
    the detached hidden states, logits (N, V)). The vocabulary projection skips the prompt positions (about 90% of a
    sequence), as training.data.masked_nll does for SFT; the rows are right-padded, so under the causal mask no
    real token attends to a pad and no padding mask is needed (attention keeps its fast causal kernel). A VLM's rows
    each read their screenshot (`images`)."""
    head = policy.model.get_output_embeddings()
    hidden = trunk_hidden(policy.model, ids, images)[:, :-1][resp]
    logits = head(hidden).float()
    lp = -F.cross_entropy(logits, ids[:, 1:][resp], reduction="none")
    values = policy.value_head(hidden.detach()).squeeze(-1)
    return lp, values, logits


def forward_packed(policy: Policy, mb: Sequence[StepSeq]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """forward_policy's outputs, in the same order, with sequences that share a prompt packed into one row
    (training/packing.py): the prompt is encoded once for all of a state's candidates."""
    pk = pack([(s.ids[: s.n_prompt], s.ids[s.n_prompt :]) for s in mb], policy.tokenizer.pad_token_id)
    hidden = packed_hidden(policy.model, pk)
    logits = policy.model.get_output_embeddings()(hidden).float()
    lp = -F.cross_entropy(logits, pk.target, reduction="none")
    values = policy.value_head(hidden.detach()).squeeze(-1)
    return lp, values, logits


def shared_prompts(seqs: Sequence[StepSeq]) -> bool:
    """Whether packing pays: some prompt is shared (with none shared, a packed row is a padded row with an explicit
    mask, which keeps attention off its fast causal kernel)."""
    return len({tuple(s.ids[: s.n_prompt]) for s in seqs}) < len(seqs)


def group_order(seqs: Sequence[StepSeq], rng: random.Random) -> list[int]:
    """Sequence indexes shuffled group by group (sequences with one prompt stay together, so a minibatch packs
    them into one row)."""
    by: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(seqs):
        by.setdefault(tuple(s.ids[: s.n_prompt]), []).append(i)
    groups = list(by.values())
    rng.shuffle(groups)
    return [i for g in groups for i in g]


@torch.no_grad()
def step_values(
    policy: Policy, steps: Sequence[tuple[list[int], list[int], bytes | None]], batch_size: int = 64
) -> list[torch.Tensor]:
    """The critic's value before each response token, for (prompt_ids, response_ids, image) steps (image: a VLM's
    screenshot, else None)."""
    out: list[torch.Tensor] = []
    pad = policy.tokenizer.pad_token_id
    for i in range(0, len(steps), batch_size):
        chunk = [
            StepSeq(p + r, len(p), torch.empty(0), torch.empty(0), torch.empty(0), image=im)
            for p, r, im in steps[i : i + batch_size]
        ]
        ids, resp = _pad(chunk, pad)
        _, values, _ = forward_policy(policy, ids, resp, _images(chunk))
        out += list(values.split(resp.sum(1).tolist()))
    return out


def build_sequences(
    policy: Policy, trajs: Sequence[Trajectory], rewards: Sequence[float], cfg: RLConfig
) -> tuple[list[StepSeq], dict]:
    """Advantages and critic targets for every agent token, then one StepSeq per step."""
    pairs = [(s.prompt_ids, s.response_ids, s.image) for tr in trajs for s in tr.steps]
    values = step_values(policy, pairs) if cfg.algo == "ppo" else [torch.zeros(len(r)) for _, r, _ in pairs]
    grpo = group_advantages(rewards, [tr.task.task_id for tr in trajs], cfg.grpo_eps) if cfg.algo == "grpo" else None
    seqs: list[StepSeq] = []
    lams: list[float] = []
    k = 0
    mean_tokens = sum(tr.n_agent_tokens for tr in trajs) / max(1, len(trajs))
    for n, (tr, r) in enumerate(zip(trajs, rewards)):
        lens = [len(s.response_ids) for s in tr.steps]
        w = mean_tokens / max(1, sum(lens)) if cfg.loss_norm == "trajectory" else 1.0
        v = torch.cat(values[k : k + len(lens)]) if lens else torch.zeros(0)
        k += len(lens)
        rew = torch.zeros(len(v))
        if len(v):
            rew[-1] = r
        if grpo is not None:
            adv, ret = torch.full((len(v),), grpo[n]), torch.zeros(len(v))
        else:
            adv, ret, lam = decoupled_gae(rew, v, cfg)
            lams.append(lam)
        off = 0
        for s, L in zip(tr.steps, lens):
            if L == 0:
                continue
            seqs.append(
                StepSeq(
                    s.prompt_ids + s.response_ids,
                    len(s.prompt_ids),
                    torch.tensor(s.logprobs),
                    adv[off : off + L],
                    ret[off : off + L],
                    w,
                    s.image,
                )
            )
            off += L
    if cfg.algo == "ppo" and seqs:  # normalise advantages over the batch's agent tokens
        a = torch.cat([s.adv for s in seqs])
        mu, sd = a.mean(), a.std().clamp(min=1e-6)
        for s in seqs:
            s.adv = (s.adv - mu) / sd
    if cfg.negative_weight != 1.0:  # scale the push away from what scored below the baseline
        for s in seqs:
            s.adv = torch.where(s.adv < 0, s.adv * cfg.negative_weight, s.adv)
    return seqs, {"lambda_policy_mean": sum(lams) / len(lams) if lams else None}


# ------------------------------------------------------------------ losses
def ppo_losses(
    policy: Policy, mb: Sequence[StepSeq], cfg: RLConfig, critic_only: bool = False
) -> tuple[torch.Tensor, dict]:
    """Clip-higher PPO loss and the critic's MSE, averaged over the minibatch's agent tokens only."""
    images = _images(mb)
    if cfg.pack_prompts and images is None and shared_prompts(mb):  # a VLM's rows carry their own screenshot
        new_lp, v, logits = forward_packed(policy, mb)
    else:
        ids, resp = _pad(mb, policy.tokenizer.pad_token_id)
        new_lp, v, logits = forward_policy(policy, ids, resp, images)
    old_lp = torch.cat([s.old_lp for s in mb])
    adv = torch.cat([s.adv for s in mb])
    ret = torch.cat([s.ret for s in mb])
    v_loss = 0.5 * ((v - ret) ** 2).mean()
    if critic_only:
        return cfg.value_coef * v_loss, {"value_loss": float(v_loss.detach())}
    w = torch.cat([torch.full((len(s.adv),), s.weight) for s in mb])
    ratio = torch.exp(new_lp - old_lp)
    clipped = torch.clamp(ratio, 1 - cfg.eps_low, 1 + cfg.eps_high)
    pg_loss = -(w * torch.min(ratio * adv, clipped * adv)).sum() / w.sum()
    loss = pg_loss + (cfg.value_coef * v_loss if cfg.algo == "ppo" else 0.0)
    if cfg.entropy_coef:
        ent = token_entropy(logits)
        loss = loss - cfg.entropy_coef * ent
    else:
        with torch.no_grad():
            ent = token_entropy(logits)
    with torch.no_grad():
        low, high = clip_fractions(ratio, adv, cfg.eps_low, cfg.eps_high)
        log_ratio = new_lp - old_lp
        kl = float(((log_ratio.exp() - 1) - log_ratio).mean())  # k3: KL(behaviour || current), >= 0
    return loss, {
        "pg_loss": float(pg_loss.detach()),
        "value_loss": float(v_loss.detach()),
        "clip_low": low,
        "clip_high": high,
        "clip_frac": low + high,
        "kl": kl,
        "entropy": float(ent.detach()),
        "tokens": int(new_lp.numel()),
    }


# ------------------------------------------------------------------ the loop
def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _avg(stats: Sequence[dict], key: str) -> float | None:
    return _mean([st[key] for st in stats if key in st])


def _episode_batch(policy: Policy, got: Batch, verifier: RewardFn, cfg: RLConfig, it: int, cur: Curriculum | None,
                   replay: ReplayBuffer) -> tuple[list[StepSeq], dict, tuple]:  # fmt: skip
    """Steps 3-5 with episode groups: the outcome reward, fixed groups, stale episodes dropped, advantages."""
    trajs = got.trajectories
    gen_tokens = sum(tr.n_agent_tokens for tr in trajs)
    # 3. score with the verifier (plus format reward / length penalty)
    rewards = shaped_rewards(trajs, verifier, cfg)
    for tr, r in zip(trajs, rewards):
        tr.reward = r
    stats: dict = {
        "iter": it,
        "reward_mean": _mean(rewards) or 0.0,
        "pass_rate": sum(tr.passed for tr in trajs) / max(1, len(trajs)),
        "steps_per_episode": _mean([len(tr.steps) for tr in trajs]),
        "episodes": len(trajs),
        "gen_tokens_per_s": gen_tokens / max(got.seconds, 1e-9),
        "gen_s": got.seconds,
    }
    if cur:
        stats.update(cur.update(trajs))
    # 4. all-equal groups dropped or rescued by the task's latest success; episodes beyond the lag dropped
    batch_t, batch_r, g = fix_groups(trajs, rewards, cfg.all_equal, replay)
    replay.add(trajs)
    batch_t, batch_r, ages = drop_stale(batch_t, batch_r, it, cfg.max_lag)
    stats.update(
        g, age_mean=_mean(ages), age_max=max(ages, default=0), stale_dropped=sum(a > cfg.max_lag for a in ages)
    )
    if not batch_t:
        return [], stats, ()
    # 5. advantages (decoupled, length-adaptive GAE for PPO; group-normalised for GRPO)
    seqs, info = build_sequences(policy, batch_t, batch_r, cfg)
    stats.update(info, samples=len(batch_t))
    return seqs, stats, (batch_t, batch_r)


def _step_batch(policy: Policy, got: Batch, cfg: RLConfig, it: int,
                cur: Curriculum | None) -> tuple[list[StepSeq], dict, tuple]:  # fmt: skip
    """Steps 3-5 with step groups (training/branch.py): the candidates scored by the environment's progress,
    group-relative advantages per state, all-equal states dropped, a batch beyond the lag dropped."""
    trajs, st, age = got.trajectories, got.stats, it - got.version
    stale = age > cfg.max_lag
    cands = [] if stale else got.candidates
    # what the screen search found is learnt by imitation (no sampler log-probabilities for a ratio); a correction
    # stays right for its state however the policy moved, so a stale batch's are kept
    good = [(c.prompt_ids, c.response_ids) for c in got.candidates if verified(c) and (c.explored or not stale)]
    cands = [c for c in cands if not c.explored]
    if cfg.step_reward == "progress":  # moved the task along, saying so in its thought, or not
        cands = progress_only(cands)
    kept, adv, equal = step_advantages(cands, cfg.grpo_eps)
    stats: dict = {
        "iter": it,
        "reward_mean": st["step_reward_mean"],
        "pass_rate": st["greedy_pass_rate"],
        "steps_per_episode": _mean([len(tr.steps) for tr in trajs]),
        "episodes": len(trajs),
        "states": st["states"],
        "forward_share": st["forward_share"],
        "consistent_share": _mean([float(c.consistent) for c in got.candidates if not c.explored]),
        "explored_found": st.get("explored_found", 0),
        "sampled_found": st.get("sampled_found", 0),
        "all_equal_share": equal,
        "gen_tokens_per_s": st["gen_tokens"] / max(got.seconds, 1e-9),
        "gen_s": got.seconds,
        "age_mean": float(age),
        "age_max": age,
        "stale_dropped": len(got.candidates) if stale else 0,
        "samples": len(kept),
    }
    if cur:
        stats.update(cur.update(trajs))
    mean_len = _mean([len(c.response_ids) for c in kept]) or 1.0
    marker = policy.tokenizer("\nAction:", add_special_tokens=False)["input_ids"] if cfg.credit == "action" else []
    seqs = []
    for c, a in zip(kept, adv):
        a = a * cfg.negative_weight if a < 0 else a
        n = len(c.response_ids)
        if n and a != 0.0:  # a zero advantage has no gradient: the sequence would cost a forward pass for nothing
            w = mean_len / n if cfg.loss_norm == "trajectory" else 1.0
            per_token = torch.full((n,), a)
            per_token[: action_start(c.response_ids, marker)] = 0.0
            seqs.append(StepSeq(c.prompt_ids + c.response_ids, len(c.prompt_ids), torch.tensor(c.logprobs),
                                per_token, torch.zeros(n), w))  # fmt: skip
    stats["corrections"] = len(good)
    return seqs, stats, tuple(good)


def action_start(ids: Sequence[int], marker: Sequence[int]) -> int:
    """The index of the first token after `marker` in `ids` (0 without a marker or when it is absent)."""
    k = len(marker)
    if not k:
        return 0
    for i in range(len(ids) - k + 1):
        if list(ids[i : i + k]) == list(marker):
            return i + k
    return 0


def acting(cfg: RLConfig, prompt_cfg: PromptConfig, max_new_tokens: int) -> tuple[str, dict]:
    """What one batch of acting is (training.workers.act): its kind and the sampler's and branching's options."""
    common = dict(temperature=cfg.temperature, max_new_tokens=max_new_tokens, prompt_cfg=prompt_cfg)
    if cfg.groups == "step":
        return "step", dict(common, group_size=cfg.group_size, max_states=cfg.max_states, at=cfg.branch_at,
                            with_greedy=cfg.with_greedy, explore=cfg.explore, explore_keep=cfg.explore_keep)  # fmt: skip
    return "episode", dict(common, attempts=cfg.group_size, max_steps=cfg.max_steps)


def train_rl(
    policy: Policy,
    tasks_fn: TasksFn,
    verifier: RewardFn,
    cfg: RLConfig = RLConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    max_new_tokens: int = 64,
    seed_offset: int = 0,
    on_iter: Callable[[int, dict], None] | None = None,
    known_good: tuple[TaskInfo, Sequence[str]] | None = None,
    rehearsal: Sequence | None = None,
    env: str = "sandbox",
    env_tasks: Sequence[str] | None = None,
    actor: ServedActor | None = None,
) -> tuple[list[float], dict]:
    """Plain function: `cfg.iterations` of (pick tasks -> act -> score -> fix groups -> advantages -> update), one
    record of metrics per iteration. `known_good` (a task and a solution's actions) is scored first and must earn
    the full reward. `rehearsal` (encoded SFT examples) adds `cfg.rehearsal_coef` x their masked loss to every policy
    step (InstructGPT's PPO-ptx): practice must not unlearn what copying taught. With `cfg.workers`, acting runs in
    worker processes (or on the Dask cluster at `cfg.worker_address`) a batch ahead of the learner
    (training/workers.py); `env` names the backend they rebuild the tasks in. With `actor`, acting goes through a
    policy server synced to the learner's weights instead (training/rollout_server.py)."""
    if cfg.groups not in ("episode", "step") or cfg.credit not in ("response", "action"):
        raise ValueError(f"RLConfig: groups is 'episode' or 'step' (not {cfg.groups!r}), credit 'response' or "
                         f"'action' (not {cfg.credit!r})")  # fmt: skip
    if cfg.step_reward not in ("shaped", "progress"):
        raise ValueError(f"RLConfig: step_reward is 'shaped' or 'progress', not {cfg.step_reward!r}")
    if cfg.explore and (cfg.groups != "step" or cfg.self_imitation <= 0):
        raise ValueError("exploring the screen's actions needs step groups and self_imitation > 0 (what it finds is "
                         "learnt by imitation)")  # fmt: skip
    if cfg.groups == "step" and cfg.algo != "grpo":
        raise ValueError("step groups have group-relative advantages: use algo='grpo'")
    if cfg.groups == "step" and policy.kind == "vlm":
        raise ValueError("step groups branch text prompts: use groups='episode' for a vision-language policy")
    if actor is not None and (cfg.workers or cfg.groups != "episode"):
        raise ValueError("rollouts through a policy server are episode groups acted by the server: use "
                         "groups='episode' and workers=0")  # fmt: skip
    if known_good is not None:
        r, _ = known_good_reward(known_good[0], known_good[1], lambda t: shaped_rewards(t, verifier, cfg))
        if r < 1.0 - 1e-6 - cfg.length_penalty * len(known_good[1]):
            raise RuntimeError(f"the reward gives a known-good episode {r:.3f}, not 1: the reward or env is broken")
    params = policy.parameters()
    opt = make_optimizer(params, cfg.optim)
    seed = cfg.seed + seed_offset * 1000
    rng = random.Random(cfg.seed + seed_offset)
    by = cfg.curriculum_by
    cur = (Curriculum(tasks_fn, cfg.pool_size or 4 * cfg.tasks_per_iter, seed, group=(lambda t: getattr(t, by)) if by else None,
                      max_visits=cfg.max_visits) if cfg.curriculum else None)  # fmt: skip
    replay = ReplayBuffer()
    losses: list[float] = []
    hist: list[dict] = []
    tokens = samples = 0
    total_updates = max(1, cfg.iterations * cfg.ppo_epochs)
    update = 0
    t_start = time.perf_counter()
    ptx = None
    corrections = Corrections(cfg.corrections_max)
    ptx_coef = cfg.rehearsal_coef or 1.0  # self-imitation alone replays at weight 1
    if (rehearsal and cfg.rehearsal_coef > 0) or cfg.self_imitation > 0:
        ptx = rehearsal_batches(list(rehearsal or []) if cfg.rehearsal_coef > 0 else [], corrections,
                                cfg.minibatch_size, cfg.self_imitation, policy.tokenizer.pad_token_id, seed)  # fmt: skip
    kind, act_params = acting(cfg, prompt_cfg, max_new_tokens)
    executor = executor_for(cfg.worker_address, cfg.workers, cfg.worker_threads) if cfg.workers else None
    if executor is not None and cfg.learner_threads:
        torch.set_num_threads(cfg.learner_threads)
    source = Rollouts(policy, kind, act_params, executor, env, env_tasks, depth=1 + cfg.workers, server=actor)
    submitted = 0

    def pick() -> list[TaskInfo]:  # 1. tasks where the policy sometimes wins (the curriculum), or fresh ones
        return cur.select(cfg.tasks_per_iter, rng) if cur else list(tasks_fn(cfg.tasks_per_iter, seed + submitted))

    idle_nll: list[float] = []

    def lr_now() -> float:
        """The schedule over the job's length: its iterations' epochs, or, with a time budget, the share of it spent
        (a job stopped by the clock would otherwise end at its peak rate, where copying ends at a tenth of it)."""
        if cfg.time_budget_s:
            return lr_at(int(1000 * (time.perf_counter() - t_start) / cfg.time_budget_s), 1000, cfg.optim)
        return lr_at(max(0, update - 1), total_updates, cfg.optim)

    def step(loss: torch.Tensor) -> None:
        """One clipped optimiser step on `loss` (a policy minibatch's, or a rehearsal step's) at the schedule's rate."""
        for gr in opt.param_groups:
            gr["lr"] = lr_now()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
        opt.step()

    def rehearse() -> None:
        """A rehearsal step while the workers act: the learner's core keeps copying what copying taught."""
        b = next(ptx)  # type: ignore[arg-type]
        if b is None:  # nothing to rehearse yet (self-imitation before its first correction)
            time.sleep(0.05)
            return
        policy.model.train()
        loss = ptx_coef * masked_nll(policy.model, b)
        step(loss)
        policy.model.eval()
        idle_nll.append(float(loss.detach()))

    try:
        for it in range(cfg.iterations):
            if cfg.time_budget_s is not None and it and time.perf_counter() - t_start > cfg.time_budget_s:
                break
            while len(source.pending) < source.depth and submitted < cfg.iterations:
                source.submit(pick(), it, seed + submitted)
                submitted += 1
            t0 = time.perf_counter()
            idle_nll.clear()
            # 2. act: G attempts per task, or G actions at each state (training/branch.py)
            got = source.take(it, rehearse if (ptx is not None and cfg.rehearse_while_waiting) else None)
            if cfg.groups == "step":  # 3-5 at the step level
                seqs, stats, batch = _step_batch(policy, got, cfg, it, cur)
                if cfg.self_imitation > 0:
                    corrections.add(batch)
                    stats["corrections_kept"] = len(corrections.items)
            else:
                seqs, stats, batch = _episode_batch(policy, got, verifier, cfg, it, cur, replay)
            stats["learner_wait_s"] = got.waited
            stats["rehearsal_while_waiting"] = len(idle_nll)
            if actor is not None:  # the served version that acted, and the learner's update it holds
                stats.update(policy_version=actor.version, policy_step=got.version)
            samples += stats.pop("samples", 0)
            if ptx is not None and cfg.rehearsal_steps:  # the imitation half: copying data and corrections
                idle = len(idle_nll)
                for _ in range(cfg.rehearsal_steps):
                    rehearse()
                stats["rehearsal_steps"] = len(idle_nll) - idle
            if not seqs:  # nothing to learn from this time (every group all-equal): the next tasks differ
                stats["updates"] = 0
                hist.append(stats)
                if on_iter:
                    on_iter(it, stats)
                continue
            tokens += sum(len(s.ids) for s in seqs)
            # 6. value pretraining: the critic first, with the policy frozen (only on the first iteration of a job)
            if cfg.algo == "ppo" and it == 0 and cfg.value_pretrain_steps:
                vl = []
                for _ in range(cfg.value_pretrain_steps):
                    mb = rng.sample(seqs, min(cfg.minibatch_size, len(seqs)))
                    loss, st = ppo_losses(policy, mb, cfg, critic_only=True)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    vl.append(st["value_loss"])
                stats["value_pretrain_loss"] = [vl[0], vl[-1]] if vl else None
                seqs, _ = build_sequences(policy, *batch, cfg)  # advantages from the fitted critic
            # 7. PPO / GRPO epochs over shuffled minibatches of steps
            policy.model.train()
            mbs: list[dict] = []
            for _ in range(cfg.ppo_epochs):
                update += 1
                if cfg.pack_prompts:
                    order = group_order(seqs, rng)
                else:
                    order = list(range(len(seqs)))
                    rng.shuffle(order)
                for i in range(0, len(order), cfg.minibatch_size):
                    mb = [seqs[j] for j in order[i : i + cfg.minibatch_size]]
                    loss, st = ppo_losses(policy, mb, cfg)
                    loss = cfg.pg_coef * loss
                    if ptx is not None and (b := next(ptx)) is not None:
                        nll = masked_nll(policy.model, b)
                        loss = loss + ptx_coef * nll
                        st["rehearsal_nll"] = float(nll.detach())
                    step(loss)
                    losses.append(float(loss.detach()))
                    mbs.append(st)
            policy.model.eval()
            stats["updates"] = len(mbs)
            for k in ("pg_loss", "value_loss", "clip_low", "clip_high", "clip_frac", "kl", "entropy", "rehearsal_nll"):
                stats[k] = _avg(mbs, k)
            stats["wall_s"] = time.perf_counter() - t0
            hist.append(stats)
            if on_iter:
                on_iter(it, stats)
    finally:
        source.close()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
    return losses, {"iterations": hist, "samples": samples, "tokens": tokens,
                    "wall_s": time.perf_counter() - t_start}  # fmt: skip


def rehearsal_items(
    lake,  # noqa: ANN001
    policy: Policy,
    prompt_cfg: PromptConfig,
    seed: int,
    version: int | None = None,
) -> tuple[list | None, int | None]:
    """The SFT pile's examples (at `version`, the newest when None; episodes per task capped at 8, drawn with `seed`)
    for a rehearsal loss, and that version; (None, None) when the pile is empty."""
    from storage import LakeError
    from training.data import encode_all, pile_examples, read_pile

    try:
        pile = read_pile(lake, "sft", version, screenshots=policy.kind == "vlm")
    except LakeError:  # no SFT pile in this lake yet
        return None, None
    if policy.kind == "vlm":  # the pile's steps over their screenshots (training/vision.py)
        items, _ = vision_items(lake, policy, pile.rows, prompt_cfg, 8, seed)
        return (items, pile.version) if items else (None, None)
    examples = pile_examples(pile.rows, prompt_cfg, 8, seed) if pile.rows.num_rows else []
    return (encode_all(policy.tokenizer, examples, prompt_cfg), pile.version) if examples else (None, None)


def rl_job(
    lake,  # noqa: ANN001
    round: int,
    base: str | Policy,
    tasks_fn: TasksFn,
    verifier: RewardFn,
    cfg: RLConfig = RLConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    max_new_tokens: int = 64,
    on_iter: Callable[[int, dict], None] | None = None,
    known_good: tuple[TaskInfo, Sequence[str]] | None = None,
    rollouts: RolloutServer | None = None,
) -> tuple[JobResult, Policy]:
    """RL in the environment (no pile: its data are its own rollouts), published and recorded like the others.
    `rollouts`: generate them through a policy server on this lake (training/rollout_server.py); the checkpoint of
    every policy version it served is recorded in the run's metrics."""
    t0 = time.perf_counter()
    b = resolve_base(lake, base)
    rehearsal, pile_version = (
        rehearsal_items(lake, b.policy, prompt_cfg, cfg.seed + round) if cfg.rehearsal_coef > 0 else (None, None)
    )
    actor = ServedActor(lake, rollouts, round) if rollouts is not None else None
    screens: set[tuple[int, int]] = set()

    def tasks_seen(n: int, seed: int) -> Sequence[TaskInfo]:  # the screens a VLM's convention mapped
        got = tasks_fn(n, seed)
        screens.update((t.screen_width, t.screen_height) for t in got if t.screen_width and t.screen_height)
        return got

    with compiled(b.policy.model, cfg.optim.compile):  # the training forwards only; sampling stays eager
        losses, info = train_rl(b.policy, tasks_seen, verifier, cfg, prompt_cfg, max_new_tokens, round, on_iter,
                                known_good, rehearsal, actor=actor)  # fmt: skip
    metrics = {"iterations": info["iterations"], "rehearsal_examples": len(rehearsal or [])}
    config = {"rl": to_dict(cfg), "prompt": to_dict(prompt_cfg)}
    if actor is not None:
        metrics["rollout_checkpoints"] = actor.published
        config["rollouts"] = actor.server.as_dict()
    if b.policy.kind == "vlm":
        config["vision"] = b.policy.model.vision.as_dict(sorted(screens))  # type: ignore[union-attr]
    res = JobResult("rl", round, b.uri, samples=info["samples"], tokens=info["tokens"], losses=losses,
                    pile_version=pile_version, metrics=metrics, config=config)  # fmt: skip
    return finish(lake, res, b.policy, t0), b.policy
