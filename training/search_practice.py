"""Practice by search and imitation: the environment finds new examples, the learner copies them.

Policy-gradient practice here never beat copying for the same time (docs/training.md, "Practice": 20-odd settings):
its errors are grounding, and what it lacks is unique examples, which a 1-in-8 lucky sample supplies slowly. Fresh
expert episodes bought +15 points where the same 490 again bought +7. So practice makes fresh examples itself: a
worker solves fresh tasks by search with the verifier's outcome only (training/search.py), and the learner trains
on what was found, newest first, each example about `passes` times, with a share of the copying data in every batch
so the copying skills the search's data lacks stay (PPO-ptx's rehearsal). Expert iteration (Anthony et al. 2017)
without a demonstrator. While a search batch is out the learner keeps training (found examples again, at random),
and while the first batch is out it takes copying steps, so neither core idles; the learning rate follows the
clock, as SFT's follows its steps. The search is sent out only while the learner's backlog of unseen examples is
short (`backlog_steps`), and meanwhile the learner steps on every core: the search can find more than the learner
trains on, and a learner step on two cores takes about half the time of one beside a search.
"""

from __future__ import annotations

import bisect
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import torch

from schemas.prompt import PromptConfig
from training.config import SearchPracticeConfig
from training.rollout import TaskInfo
from training.search import SearchBatch, SearchJob, search_batch, search_infos, solution_row


def train_by_search(
    policy,  # noqa: ANN001 - training.model.Policy
    tasks_fn: Callable[[int, int], Sequence[TaskInfo]],
    cfg: SearchPracticeConfig,
    prompt_cfg: PromptConfig = PromptConfig(),
    rehearsal: Sequence[Any] | None = None,
    env: str = "sandbox",
    env_tasks: Sequence[str] | None = None,
    on_iter: Callable[[int, dict[str, Any]], None] | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Search fresh tasks and imitate the solutions for `cfg.time_budget_s` seconds; returns the job's record (one
    entry per search batch in "iterations"). `tasks_fn(n, seed)`: n fresh training tasks; `rehearsal`: the copying
    data's encoded examples; `executor`: where the search runs (None: `cfg.workers` local processes, or in-process)."""
    from training.compiled import compiled
    from training.data import collate, encode_all, episode_examples, masked_nll
    from training.loop import lr_at, make_optimizer
    from training.precision import choose
    from training.prior import ActionPrior
    from training.procs import PolicyBlob, local_executor

    t_start = time.perf_counter()
    deadline = t_start + cfg.time_budget_s
    rng = random.Random(cfg.seed)
    tok, model = policy.tokenizer, policy.model
    pad = tok.pad_token_id
    own = executor is None and cfg.workers > 0
    pool = local_executor(cfg.workers, 1) if own else executor
    threads = torch.get_num_threads()
    alone = cfg.alone_threads or threads
    gate = pool is not None and cfg.backlog_steps is not None  # search only while the learner's backlog is short
    tried: Counter = Counter()  # by level (the record's figures)
    solved: Counter = Counter()
    cell_tried: Counter = Counter()  # by (family, level): what the search gives up on
    cell_solved: Counter = Counter()
    guided_tried: Counter = Counter()  # by (family, level): tasks of given-up cells searched under the prior
    guided_solved: Counter = Counter()
    probe_tried: Counter = Counter()  # the same since the cell's last probe under the prior
    probe_solved: Counter = Counter()
    paused: dict[tuple[str, Any], int] = {}  # cells the prior could not solve either -> the batch it gave up at
    draws = 0
    blob = PolicyBlob.of(policy) if pool is not None and cfg.guide_states else None

    def skipped(cell: tuple[str, Any]) -> bool:
        return cell_tried[cell] >= cfg.probe and cell_solved[cell] < cfg.min_solve_rate * cell_tried[cell]

    def guidable(cell: tuple[str, Any]) -> bool:
        """A given-up cell is searched under the prior until the prior fails there as often (the same probe); it is
        probed again `reprobe_batches` later, when the learner's policy has moved."""
        if cell in paused and len(hist) - paused[cell] >= cfg.reprobe_batches:
            del paused[cell]
            probe_tried[cell] = probe_solved[cell] = 0
        return cell not in paused

    def draw() -> tuple[list[TaskInfo], list[bool]]:
        """The next batch's tasks: fresh ones, minus those of cells the search has given up on (all of them, when
        it has given up on every cell the tasks come from: it keeps trying rather than spin on empty batches),
        plus, with `guide_states`, up to `guided_per_batch` of those cells' tasks to search under the prior."""
        nonlocal draws
        out: list[TaskInfo] = []
        hard: list[TaskInfo] = []
        for _ in range(50):
            draws += 1
            got = fresh_tasks(tasks_fn, cfg.tasks_per_batch, cfg.seed + 7919 * draws, rng)
            kept = [t for t in got if not skipped((t.family, t.level))]
            hard += [t for t in got if skipped((t.family, t.level)) and guidable((t.family, t.level))]
            out += kept if kept or out else got
            if len(out) >= cfg.tasks_per_batch:
                break
        n_guided = min(len(hard), cfg.guided_per_batch) if cfg.guide_states else 0
        plain = out[: cfg.tasks_per_batch - n_guided]
        hard = [t for t in hard if all(t is not p for p in plain)][:n_guided]  # every cell given up: `out` has them
        return plain + hard, [False] * len(plain) + [True] * len(hard)

    def submit() -> tuple[list[TaskInfo], list[bool], Future | None]:
        infos, guided = draw()
        if pool is None:
            return infos, guided, None
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()} if any(guided) else None
        job = SearchJob(env, tuple(env_tasks) if env_tasks else None, [t.payload for t in infos], cfg.max_nodes,
                        tuple(guided), cfg.guide_states, blob if any(guided) else None, weights, prompt_cfg)  # fmt: skip
        return infos, guided, pool.submit(search_batch, job)

    bf16 = choose(cfg.optim.bf16, model).bf16
    opt = make_optimizer(model.parameters(), cfg.optim)
    k_rehearse = round(cfg.rehearsal_share * cfg.batch_size) if rehearsal else 0
    k_fresh = cfg.batch_size - k_rehearse
    unseen: deque = deque()  # found examples not yet trained on, oldest first
    found: list[Any] = []
    queued: deque = deque()  # the next steps' batches: (examples, replayed), bucketed by length
    rehearse = _Bucket(rehearsal or [])
    hist: list[dict[str, Any]] = []
    losses: list[float] = []
    all_losses: list[float] = []
    steps = replayed = waiting = alone_steps = 0
    due = 0.0  # in-process: steps left before the next search (each new example `passes` times)

    def backlog() -> float:
        """Learner steps' worth of found examples not yet trained on (unseen, and queued fresh batches)."""
        return len(unseen) / max(1, k_fresh) + sum(1 for b in queued if not b[1])

    pending: tuple | None = submit()  # None: with `gate`, no search out (the learner has enough to train on)
    with compiled(model, cfg.optim.compile):  # the learner's forward (training/compiled.py)
        try:
            while time.perf_counter() < deadline and (cfg.max_steps is None or steps - waiting < cfg.max_steps):
                if pending is None and backlog() < cfg.backlog_steps:
                    pending = submit()
                out = pending is not None and pending[2] is not None
                if pool is not None:  # one core to the search while it is out, every core to the learner otherwise
                    n_threads = (cfg.learner_threads or threads) if out else alone
                    if torch.get_num_threads() != n_threads:
                        torch.set_num_threads(n_threads)
                infos, guided, fut = pending if pending is not None else ([], [], None)
                ready = pending is not None and (fut.done() if fut is not None else due <= 0)
                if ready or (pending is not None and not found and not (rehearsal and fut is not None)):
                    if fut is not None:
                        got: SearchBatch = fut.result()
                    else:
                        prior = ActionPrior(model, tok, prompt_cfg) if any(guided) else None
                        got = search_infos(infos, cfg.max_nodes, prior, guided, cfg.guide_states)
                    if gate:
                        pending = None  # sent again at the top of the loop once the backlog is short
                    else:
                        pending = submit() if time.perf_counter() < deadline else ([], [], None)
                    rows, by_level = [], Counter()
                    for info, g, r in zip(infos, guided, got.results):
                        cell = (info.family, info.level)
                        tried[info.level] += 1
                        (guided_tried if g else cell_tried)[cell] += 1
                        probe_tried[cell] += g
                        if r.solution is not None:
                            solved[info.level] += 1
                            (guided_solved if g else cell_solved)[cell] += 1
                            probe_solved[cell] += g
                            by_level[info.level] += 1
                            rows.append(solution_row(info, r.solution))
                        if (
                            g
                            and probe_tried[cell] >= cfg.probe
                            and probe_solved[cell] < cfg.min_solve_rate * probe_tried[cell]
                        ):
                            paused.setdefault(cell, len(hist))
                    new = encode_all(tok, [x for row in rows for x in episode_examples(row, prompt_cfg)], prompt_cfg)
                    unseen.extend(new)
                    if new:  # fresh examples go before replays queued while the search was out
                        queued = deque(b for b in queued if not b[1])
                    found += new
                    due += cfg.passes * len(new) / max(1, k_fresh)
                    st = {"tasks": len(infos), "solved": len(rows), "solved_by_level": dict(sorted(by_level.items())),
                          "nodes_mean": sum(r.nodes for r in got.results) / max(1, len(got.results)),
                          "search_s": got.seconds, "examples": len(new), "found_total": len(found), "steps": steps,
                          "replayed_steps": replayed, "waiting_steps": waiting, "alone_steps": alone_steps, "loss": sum(losses) / len(losses) if losses else None,
                          "skipped": sorted(f"{f}/L{lv}" for f, lv in cell_tried if skipped((f, lv))),
                          "guided": {f"{f}/L{lv}": f"{guided_solved[(f, lv)]}/{n}" for (f, lv), n in sorted(guided_tried.items())},
                          "elapsed_s": time.perf_counter() - t_start}  # fmt: skip
                    losses = []
                    hist.append(st)
                    if on_iter:
                        on_iter(len(hist) - 1, st)
                    if not found:
                        continue
                if not found:  # the first search is still out: copying steps meanwhile, so the core does not idle
                    waiting += 1
                    fresh = rehearse.near(rng.choice(rehearse.lens), cfg.batch_size, rng)
                else:
                    if not queued:
                        queued.extend(_next_batches(unseen, found, k_fresh, rng))
                    fresh, again = queued.popleft()
                    replayed += again
                    fresh = fresh + rehearse.near(max(len(e.input_ids) for e in fresh), k_rehearse, rng)
                for g in opt.param_groups:
                    g["lr"] = lr_at(int(1000 * (time.perf_counter() - t_start) / cfg.time_budget_s), 1000, cfg.optim)
                model.train()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = masked_nll(model, collate(fresh, pad))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
                opt.step()
                losses.append(float(loss.detach()))
                all_losses.append(losses[-1])
                steps += 1
                alone_steps += pool is not None and not out
                due -= 1
        finally:
            model.eval()
            if own and pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            torch.set_num_threads(threads)
    return {"iterations": hist, "losses": all_losses, "steps": steps, "replayed_steps": replayed, "waiting_steps": waiting,
            "alone_steps": alone_steps, "examples": len(found),
            "tasks": sum(tried.values()), "solved": sum(solved.values()), "solved_by_level": dict(sorted(solved.items())),
            "tried_by_level": dict(sorted(tried.items())), "seconds": time.perf_counter() - t_start,
            "guided": {f"{f}/L{lv}": [guided_solved[(f, lv)], n] for (f, lv), n in sorted(guided_tried.items())}}  # fmt: skip


def search_job(
    lake,  # noqa: ANN001
    round: int,
    base: str | Any,
    tasks_fn: Callable[[int, int], Sequence[TaskInfo]],
    cfg: SearchPracticeConfig,
    prompt_cfg: PromptConfig = PromptConfig(),
    on_iter: Callable[[int, dict[str, Any]], None] | None = None,
    env: str = "sandbox",
    env_tasks: Sequence[str] | None = None,
) -> tuple[Any, Any]:
    """The round's RL stage as practice by search (`RoundConfig.rl_mode = "search"`), with the SFT pile's examples
    as its rehearsal, published and recorded in training_runs like every job (stage "rl")."""
    from training.config import to_dict
    from training.jobs import finish, resolve_base
    from training.rl import rehearsal_items
    from training.runs import JobResult

    t0 = time.perf_counter()
    b = resolve_base(lake, base)
    if b.policy.kind == "vlm":
        raise ValueError("practice by search trains text policies only (a VLM's examples need screenshots)")
    rehearsal, pile_version = rehearsal_items(lake, b.policy, prompt_cfg, cfg.seed + round)
    info = train_by_search(b.policy, tasks_fn, cfg, prompt_cfg, rehearsal, env, env_tasks, on_iter)
    metrics = {k: info[k] for k in ("iterations", "replayed_steps", "waiting_steps", "alone_steps", "examples", "tasks", "solved", "solved_by_level",
                                    "tried_by_level", "seconds")} | {"rehearsal_examples": len(rehearsal or [])}  # fmt: skip
    res = JobResult("rl", round, b.uri, samples=info["examples"], losses=info["losses"], pile_version=pile_version,
                    metrics=metrics, config={"search": to_dict(cfg), "prompt": to_dict(prompt_cfg)})  # fmt: skip
    return finish(lake, res, b.policy, t0), b.policy


def fresh_tasks(
    tasks_fn: Callable[[int, int], Sequence[TaskInfo]], n: int, seed: int, rng: random.Random
) -> list[TaskInfo]:
    """n fresh tasks: a window at a random place in twice as many. Why: a generator that cycles over its cells from
    the first one each call (the sandbox's: families within levels) gave a batch of 32 eleven level-1 tasks and two
    of level 5, so the hardest level, the one the held-out set scores as much as any, was practised least."""
    got = list(tasks_fn(2 * n, seed))
    at = rng.randrange(max(0, len(got) - n) + 1)
    return got[at : at + n]


#: Found examples drawn together and sorted by length before they are cut into batches (training.data's window).
WINDOW = 8


def _next_batches(unseen: deque, found: list[Any], k: int, rng: random.Random) -> list[tuple[list[Any], bool]]:
    """The next few steps' found examples, `k` a step, each batch of similar lengths: the unseen ones oldest first,
    or (all seen) random ones again. Why: a batch is padded to its longest example, and unsorted batches of found
    examples were 29% padding; sorted, a learner step took 0.31 s instead of 0.47 (1 thread)."""
    if unseen:
        pool = [unseen.popleft() for _ in range(min(len(unseen), WINDOW * k))]
        again = False
    else:
        pool, again = [found[rng.randrange(len(found))] for _ in range(WINDOW * k)], True
    pool.sort(key=lambda e: len(e.input_ids))
    out = [(pool[i : i + k], again) for i in range(0, len(pool), k)]
    rng.shuffle(out)
    return out


class _Bucket:
    """The copying data sorted by length, so a rehearsal share can be drawn near a batch's own length."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = sorted(items, key=lambda e: len(e.input_ids))
        self.lens = [len(e.input_ids) for e in self.items]

    def near(self, length: int, n: int, rng: random.Random) -> list[Any]:
        """n random examples among the 4n whose lengths are nearest to `length` (none when there are none)."""
        if not self.items or n <= 0:
            return []
        i = bisect.bisect_right(self.lens, length)
        lo = max(0, min(i - 2 * n, len(self.items) - 4 * n))
        window = self.items[lo : lo + 4 * n]
        return [window[rng.randrange(len(window))] for _ in range(n)]
