"""Step-level groups: G attempts at the *same state*, each scored by how far one action moves the task along.

Outcome-only GRPO over whole episodes gives every step of an attempt the same advantage and learns only from
groups that are not all-pass or all-fail (on the sandbox 56-88% are). Here the policy first plays each task
greedily, as it is evaluated; at every state it visited, it then samples G candidate actions from the same
prompt. Each candidate runs in a copy of that state's environment and is scored by the environment's progress
signal, potential-based shaping (Ng, Harada and Russell 1999: it leaves the optimal policy unchanged):

    r = clip(d(s) - d(s'), -1, 1)      d = the environment's steps to go (`steps_to_go`); +1 reaching the goal,
                                       -1 an unreadable action, a failed end, or a state that cannot pass any more

so a step along a shortest path earns +1, an action that changes nothing 0, a detour -1. Candidates share the
prompt, so the tokens they have in common (the format, the first words) get advantages that cancel, and only
the choice the group disagreed on is pushed: the credit assignment outcome rewards lack. The states are the
policy's own (on-policy), including the ones its mistakes lead to, which copying an expert never shows it.

An environment offers the signal with `steps_to_go() -> int | None` and `clone()` (the sandbox's shortest-path
planner, training/envs.py); one without `clone` is rebuilt by replaying the actions so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from schemas.prompt import PromptConfig
from training.generate import sample
from training.prompt import consistent, parse_answer
from training.rollout import Environment, TaskInfo, Trajectory, _readable, run_episodes


@dataclass(frozen=True)
class Candidate:
    """One sampled action at one state: its tokens, their log-probabilities under the sampler, the reward."""

    state: int  # the group: candidates with the same state share the prompt
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    reward: float
    #: The thought says what the action does (schemas.prompt.consistent): a candidate that reaches the right element
    #: with a thought naming another was lucky, and reinforcing it would teach the thought and the action apart.
    consistent: bool = True
    #: Found by searching the screen's actions (training/explore.py), not sampled: it has no sampler log-probabilities,
    #: so it is learnt by imitation when verified (self-imitation), never by the policy-gradient ratio.
    explored: bool = False
    action: str = ""  # the parsed action ("" when unreadable)


def shaped(before: int | None, after: int | None, done: bool, passed: bool, readable: bool = True) -> float:
    """The shaped reward of one action from the steps to go before and after it (None: cannot pass any more)."""
    if not readable:
        return -1.0
    if done:
        return 1.0 if passed else -1.0
    if before is None or after is None:
        return -1.0
    return float(max(-1, min(1, before - after)))


def progress_reward(before: int | None, env: Environment, done: bool, readable: bool) -> float:
    """The shaped reward of one action, given the steps to go before it and the environment after it."""
    if not readable or done:
        return shaped(before, None, done, readable and done and env.verify()[0], readable)
    return shaped(before, env.steps_to_go(), False, False)  # type: ignore[attr-defined]


def _clone(env: Environment, task: TaskInfo, actions: Sequence[str]) -> Environment:
    clone = getattr(env, "clone", None)
    if clone is not None:
        return clone()
    e = task.make_env()
    e.reset()
    for a in actions:
        e.step(a)
    return e


def first_visits(tr: Trajectory, steps: Sequence[int], seen: set[tuple[str, str, str]]) -> list[int]:
    """The steps of `tr` whose situation (task, screen, previous action) is not in `seen` yet, adding them: a loop
    repeating one wrong action shows the same screen after the same action, only the step number differs, and is
    branched once (G candidates at each of its copies would teach one lesson several times over)."""
    out = []
    for t in steps:
        key = (tr.task.task_id, tr.steps[t].observation, tr.steps[t - 1].action if t else "")
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def verified(c: Candidate) -> bool:
    """The candidate moved the task along and its thought says what it does: a correction worth keeping."""
    return c.reward > 0 and c.consistent


def progress_only(cands: Sequence[Candidate]) -> list[Candidate]:
    """RLConfig.step_reward = "progress": 1 for a verified candidate, else 0 (a detour and a no-op are then the same
    failure)."""
    return [replace(c, reward=1.0 if verified(c) else 0.0) for c in cands]


def step_groups(
    model,  # noqa: ANN001
    tokenizer,  # noqa: ANN001
    tasks: Sequence[TaskInfo],
    *,
    group_size: int,
    temperature: float,
    max_new_tokens: int,
    prompt_cfg: PromptConfig,
    policy_version: str,
    seed: int,
    max_states: int = 12,
    at: str = "all",
    policy_step: int = 0,
    with_greedy: bool = False,
    explore: bool = False,
    explore_keep: str = "best",
) -> tuple[list[Candidate], list[Trajectory], dict]:
    """Play every task greedily, branch G candidates at its states (`at`: "all", or "mistakes": the states where the
    greedy step did not earn +1), score them. `with_greedy`: the greedy step itself joins its state's group (it is
    what evaluation would do there, so a wrong one is pushed down directly). `explore`: every action the screen
    offers that no sample tried is scored there too, written in the prompt format's answer (training/explore.py;
    `explore_keep`: see `searched`). Returns the candidates, the greedy trajectories (the curriculum's view of the tasks) and statistics for the
    iteration's record."""
    if at not in ("all", "mistakes"):
        raise ValueError(f"branch at 'all' or 'mistakes', not {at!r}")
    trajs = run_episodes(model, tokenizer, tasks, attempts=1, policy_version=policy_version, temperature=0.0,
                         max_new_tokens=max_new_tokens, prompt_cfg=prompt_cfg, seed=seed, policy_step=policy_step)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    # walk each greedy trajectory once: the environment and the steps to go at every state, the greedy step's progress
    states: list[tuple[Trajectory, int, Environment, int]] = []
    greedy: list[float] = []  # per branched state, the greedy step's own reward
    seen: set[tuple[str, str, str]] = set()
    for tr in trajs:
        env = tr.task.make_env()
        env.reset()
        if not hasattr(env, "steps_to_go"):
            raise ValueError(f"step groups need an environment with steps_to_go() ({tr.task.app} has none): "
                             "use groups='episode'")  # fmt: skip
        here: list[tuple[int, Environment, int | None, float]] = []
        actions: list[str] = []
        before = env.steps_to_go()  # type: ignore[attr-defined]
        for t, st in enumerate(tr.steps):
            snap = _clone(env, tr.task, actions)
            if not st.readable:
                here.append((t, snap, before, -1.0))
                break
            _, done, _ = env.step(st.action)
            actions.append(st.action)
            after = None if done else env.steps_to_go()  # type: ignore[attr-defined]
            here.append((t, snap, before, shaped(before, after, done, done and env.verify()[0])))
            if done:
                break
            before = after
        # a state that can no longer pass teaches nothing about progress; with `at="mistakes"` only the states where
        # the greedy step did not move the task along are branched (the errors evaluation would make)
        keep = [(t, e, b, r) for t, e, b, r in here if b is not None and (at == "all" or r < 1.0)]
        firsts = set(first_visits(tr, [k[0] for k in keep], seen))
        keep = [k for k in keep if k[0] in firsts]
        if len(keep) > max_states:
            keep = [keep[i] for i in sorted(torch.randperm(len(keep), generator=gen)[:max_states].tolist())]
        states += [(tr, t, e, b) for t, e, b, _ in keep]  # type: ignore[misc]
        greedy += [r for *_, r in keep]
    prompts = [tr.steps[t].prompt_ids for tr, t, _, _ in states for _ in range(group_size)]
    outs = sample(model, tokenizer, prompts, max_new_tokens, temperature, gen) if prompts else []
    cands: list[Candidate] = []
    for k, s in enumerate(outs):
        g = k // group_size
        tr, t, env, before = states[g]
        parsed = parse_answer(s.text) if s.finished else None
        ok = parsed is not None and _readable(parsed[1])
        obs = tr.steps[t].observation
        if ok:
            e = _clone(env, tr.task, [x.action for x in tr.steps[:t]])
            _, done, _ = e.step(parsed[1])  # type: ignore[index]
            r = progress_reward(before, e, done, True)
        else:
            r = progress_reward(before, env, False, False)
        c = ok and consistent(parsed[0], parsed[1], prompt_cfg, obs, tr.task.instruction)  # type: ignore[index]
        act = parsed[1] if ok else ""  # type: ignore[index]
        cands.append(Candidate(g, list(prompts[k]), s.token_ids, s.logprobs, r, bool(c), action=act))
    if with_greedy:
        for g, ((tr, t, _, _), r) in enumerate(zip(states, greedy)):
            st = tr.steps[t]
            c = st.readable and consistent(st.thought, st.action, prompt_cfg, st.observation, tr.task.instruction)
            act = st.action if st.readable else ""
            cands.append(Candidate(g, list(st.prompt_ids), list(st.response_ids), list(st.logprobs), r, c, action=act))
    if explore:
        cands += searched(model, tokenizer, states, cands, prompt_cfg, keep=explore_keep)
    rs = [c.reward for c in cands if not c.explored]
    stats = {
        "states": len(states),
        "greedy_pass_rate": sum(tr.passed for tr in trajs) / max(1, len(trajs)),
        "step_reward_mean": sum(rs) / max(1, len(rs)),
        "forward_share": sum(r > 0 for r in rs) / max(1, len(rs)),
        "gen_tokens": sum(len(c.response_ids) for c in cands if not c.explored)
        + sum(tr.n_agent_tokens for tr in trajs),
        "explored": sum(c.explored for c in cands),
        "explored_found": len({c.state for c in cands if c.explored and verified(c)}),
        "sampled_found": len({c.state for c in cands if not c.explored and verified(c)}),
    }
    return cands, trajs, stats


def searched(model, tokenizer, states: Sequence[tuple[Trajectory, int, Environment, int]],  # noqa: ANN001
             tried: Sequence[Candidate], prompt_cfg: PromptConfig, keep: str = "best") -> list[Candidate]:  # fmt: skip
    """At each state, every action its screen offers (training/explore.py) that no candidate there tried yet, each
    run in a copy of the state and scored by progress; the answer is the prompt format's for that action (the
    thought naming what it reaches), tokenized as sampled answers are (EOS last). `keep`: "all" the verified ones,
    or only the "best", the one the policy itself finds most likely where several make progress (measured: imitating
    every alternative, a checkbox page's 4-8 of them, spread the policy over them and cost held-out points;
    docs/training.md, "Practice")."""
    from schemas.prompt import render_answer
    from training.explore import screen_actions

    if keep not in ("all", "best"):
        raise ValueError(f"explore_keep is 'all' or 'best', not {keep!r}")
    done_here: dict[int, set[str]] = {}
    for c in tried:
        done_here.setdefault(c.state, set()).add(c.action)
    out: list[Candidate] = []
    for g, (tr, t, env, before) in enumerate(states):
        st = tr.steps[t]
        here: list[Candidate] = []
        for a in screen_actions(st.observation, tr.task.instruction):
            if a in done_here.get(g, ()):
                continue
            e = _clone(env, tr.task, [x.action for x in tr.steps[:t]])
            _, done, _ = e.step(a)
            r = progress_reward(before, e, done, True)
            text = render_answer("", a, prompt_cfg, st.observation, tr.task.instruction)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            here.append(Candidate(g, list(st.prompt_ids), ids, [], r, True, explored=True, action=a))
        good = [c for c in here if verified(c)]
        if keep == "best" and len(good) > 1:
            best = good[max(range(len(good)), key=answer_logprobs(model, st.prompt_ids, good).__getitem__)]
            here = [c for c in here if not verified(c) or c is best]
        out += here
    return out


@torch.no_grad()
def answer_logprobs(model, prompt_ids: Sequence[int], cands: Sequence[Candidate]) -> list[float]:  # noqa: ANN001
    """log p(answer | prompt) under `model` for each candidate's answer after one shared prompt."""
    from training.data import next_token_logprobs

    rows = [list(prompt_ids) + list(c.response_ids) for c in cands]
    T = max(map(len, rows))
    ids = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    lp = next_token_logprobs(model, ids, mask)
    n = len(prompt_ids)
    return [float(lp[i, n - 1 : len(r) - 1].sum()) for i, r in enumerate(rows)]


def step_advantages(cands: Sequence[Candidate], eps: float = 1e-6) -> tuple[list[Candidate], list[float], float]:
    """Group-relative advantages per state; groups whose candidates all scored the same are dropped. Returns the
    kept candidates, their advantages and the all-equal share."""
    by: dict[int, list[Candidate]] = {}
    for c in cands:
        by.setdefault(c.state, []).append(c)
    kept: list[Candidate] = []
    adv: list[float] = []
    equal = 0
    for group in by.values():
        rs = torch.tensor([c.reward for c in group])
        if len(group) < 2 or bool((rs == rs[0]).all()):
            equal += 1
            continue
        a = (rs - rs.mean()) / (rs.std(unbiased=False) + eps)
        kept += group
        adv += a.tolist()
    return kept, adv, equal / max(1, len(by))
