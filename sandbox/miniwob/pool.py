"""Browsers for rollouts: a pool of MiniWoB++ environments, one per core by default, that survives crashes.

    with BrowserPool(size=2) as pool:
        attempts = pool.run(specs, Expert, attempts=2)                   # scripted policies, one per browser thread
        attempts = pool.run_lockstep(specs, decide, attempts=4)          # a batched model: one call per tick
        pool.net_attempts                                                # [] unless a page tried to leave 127.0.0.1

Every job (task spec, attempt number) comes back as exactly one sandbox Attempt, in job order: a browser that
dies mid-episode (or will not start, or will not load the page) yields a failed Attempt (outcome and verdict
reason ``env_error``, the message in the verdict), the browser is restarted for the next job, and the run goes
on. A policy that raises yields a failed Attempt with reason ``policy_error``. Browsers are started lazily (in
parallel), switch task pages as the jobs need, and are shut down, with any orphaned Chromium process, on
close. Chromium's outside traffic goes to a refusing, recording proxy (netguard.NetGuard).

Attempts have the sandbox's simulated timeline (t_start/t_action/t_end from the thought's length, the way
sandbox.rollout does it, so the think-aloud export lines speech up with actions); the measured wall time of the
attempt and of each step is in ``attempt.meta``.
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sandbox.demonstrators import Decision
from sandbox.miniwob.browser import BrowserDied
from sandbox.miniwob.env import MiniwobEnv
from sandbox.miniwob.netguard import NetGuard, outside_connections
from sandbox.miniwob.tasks import TaskSpec, heldout_utterance, to_task
from sandbox.rollout import Attempt, AttemptStep, step_times
from schemas.records import Verdict

Job = tuple[TaskSpec, int]


@dataclass(frozen=True)
class PolicyStep:
    """What a model policy gets at one step of one attempt (run_lockstep)."""

    task: Any  # sandbox.tasks.Task (instruction = MiniWoB's utterance)
    attempt: int
    step: int
    observation: str
    screenshot: bytes | None
    history: tuple[tuple[str, str, str], ...]  # earlier (observation, thought, action)


#: decide(steps) -> one (thought, action) or (thought, action, extra) per step; `extra` (token ids,
#: log-probabilities, ...) is kept in attempt.meta["step_extras"].
BatchPolicy = Callable[[list[PolicyStep]], Sequence[tuple[Any, ...]]]


class _Timeline:
    """The sandbox's simulated think/act timeline (sandbox.rollout.step_times) across one attempt's steps."""

    def __init__(self, task_id: str, policy: str, attempt: int, pace: float) -> None:
        self.rng = random.Random(f"timing/{task_id}/{policy}/{attempt}")
        self.pace, self.t = pace, 0.5

    def next(self, thought: str, action: str) -> tuple[float, float, float]:
        t0, t_action, t_end, self.t = step_times(self.rng, self.t, thought, action, self.pace)
        return round(t0, 3), round(t_action, 3), round(t_end, 3)


def failed_attempt(
    spec: TaskSpec,
    policy: str,
    attempt: int,
    reason: str,
    message: str,
    steps: tuple[AttemptStep, ...] = (),
    **meta: Any,
) -> Attempt:
    """An attempt that the environment or the policy could not complete: kept, failed, with the reason."""
    task = to_task(spec, heldout_utterance(spec) or "", 1)
    return Attempt(
        task=task, policy=policy, attempt=attempt, steps=steps, verdict=Verdict.fail(reason, 0.0, message=message),
        outcome="env_error" if reason == "env_error" else "ended", reward=0.0, final_answer=None, meta={"error": message, **meta},
    )  # fmt: skip


def _finish(
    env: MiniwobEnv,
    policy: str,
    attempt: int,
    steps: list[AttemptStep],
    reward: float,
    t0: float,
    step_s: list[float],
    extras: list[Any] | None = None,
) -> Attempt:
    v = env.verify()
    meta: dict[str, Any] = {
        "wall_s": round(time.perf_counter() - t0, 4),
        "step_wall_s": step_s,
        "browser_restarts": env.restarts,
    }
    for k in ("raw_reward", "env_reward", "miniwob_reason"):
        if v.details and k in v.details:
            meta[k] = v.details[k]
    if extras is not None:
        meta["step_extras"] = extras
    return Attempt(
        task=env.task, policy=policy, attempt=attempt, steps=tuple(steps), verdict=v, outcome=env.outcome or "unknown",
        reward=reward, final_answer=env.answer, final_screenshot=env.observation().screenshot, meta=meta,
    )  # fmt: skip


def run_episode(env: MiniwobEnv, spec: TaskSpec, policy: Any, attempt: int = 0) -> Attempt:
    """One attempt of a sandbox-style policy (reset(task, attempt), act(env) -> Decision) in this env."""
    t0 = time.perf_counter()
    name = getattr(policy, "name", type(policy).__name__)
    try:
        env.reset(spec)
    except BrowserDied as e:
        return failed_attempt(spec, name, attempt, "env_error", str(e))
    assert env.task is not None
    steps: list[AttemptStep] = []
    step_s: list[float] = []
    clock = _Timeline(env.task.task_id, name, attempt, float(getattr(policy, "pace", 1.0)))
    reward = 0.0
    try:
        policy.reset(env.task, attempt)
    except Exception as e:  # noqa: BLE001 - a policy bug fails its attempt, not the batch
        return failed_attempt(spec, name, attempt, "policy_error", f"{type(e).__name__}: {e}")
    while not env.done:
        obs = env.observation()
        try:
            d: Decision = policy.act(env)
        except Exception as e:  # noqa: BLE001
            return failed_attempt(spec, name, attempt, "policy_error", f"{type(e).__name__}: {e}", tuple(steps))
        ts = time.perf_counter()
        r = env.step(d.action)
        step_s.append(round(time.perf_counter() - ts, 4))
        reward = r.reward
        t_start, t_action, t_end = clock.next(d.thought, d.action)
        steps.append(
            AttemptStep(
                thought=d.thought,
                action=d.action,
                observation=obs.text,
                effect=r.info.get("error") or r.info.get("effect", ""),
                reward=r.reward,
                t_start=t_start,
                t_action=t_action,
                t_end=t_end,
                screenshot=obs.screenshot,
                mistake=d.mistake,
                fatal=d.fatal,
                recovers=d.recovers,
                expert_thought=d.expert_thought,
                expert_action=d.expert_action,
                proposal=d.proposal,
                decision=d.decision,
            )  # fmt: skip
        )
    return _finish(env, name, attempt, steps, reward, t0, step_s)


def per_step(policy: Callable[[PolicyStep], Any]) -> BatchPolicy:
    """A batched policy from a per-step one (an action string, or (thought, action[, extra]))."""

    def decide(batch: list[PolicyStep]) -> list[tuple[Any, ...]]:
        out = []
        for st in batch:
            r = policy(st)
            out.append(("", r) if isinstance(r, str) else tuple(r))
        return out

    return decide


class BrowserPool:
    """`size` MiniWoB++ environments (default: one per core), each with its own headless Chromium."""

    def __init__(
        self,
        size: int | None = None,
        screenshots: bool = True,
        time_limit_s: float = 10.0,
        scale: int = 1,
        guard: bool = True,
    ) -> None:
        self.size = max(1, size or os.cpu_count() or 1)
        self.screenshots, self.time_limit_s, self.scale = screenshots, time_limit_s, scale
        self.guard = NetGuard() if guard else None
        self.envs: list[MiniwobEnv | None] = [None] * self.size
        self._lock = threading.Lock()
        self.crashes = 0  # attempts that ended with env_error
        self._slot_epoch = [0] * self.size
        self._next_slot = 0

    # ---- environments -------------------------------------------------------------------------------------------

    def env(self, i: int, spec: TaskSpec | None = None) -> MiniwobEnv:
        """Slot i's environment (its browser starts at the first reset)."""
        e = self.envs[i]
        if e is None:
            e = MiniwobEnv(
                spec or TaskSpec("click-button", 0), screenshots=self.screenshots, time_limit_s=self.time_limit_s,
                scale=self.scale, proxy_port=self.guard.port if self.guard else None, reset=False,
            )  # fmt: skip
            self.envs[i] = e
        return e

    @property
    def restarts(self) -> int:
        return sum(e.restarts for e in self.envs if e is not None)

    @property
    def net_attempts(self) -> list[str]:
        """Requests Chromium tried to send off the machine during this pool's life (none expected)."""
        return [a.request for a in self.guard.attempts] if self.guard else []

    def pids(self) -> list[int]:
        return [p for e in self.envs if e is not None and e.browser is not None for p in e.browser.pids]

    def outside_connections(self) -> list[str]:
        return outside_connections(self.pids())

    def close(self) -> None:
        """Shut every browser down (killing leftovers) and stop the proxy."""
        live = [e for e in self.envs if e is not None]
        if live:
            with ThreadPoolExecutor(len(live)) as ex:  # quitting a browser takes about a second; do them together
                list(ex.map(lambda e: e.close(), live))
        self.envs = [None] * self.size
        if self.guard is not None:
            self.guard.close()
            self.guard = None

    def __enter__(self) -> BrowserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- scripted policies: one thread per browser --------------------------------------------------------------

    def run(
        self,
        specs: Sequence[TaskSpec],
        policy_factory: Callable[[], Any],
        attempts: int = 1,
        progress: bool = True,
        label: str = "MiniWoB++",
    ) -> list[Attempt]:
        """Attempts 0..attempts-1 of every spec, spread over the browsers; returned in (spec, attempt) order."""
        jobs: list[Job] = [(s, k) for s in specs for k in range(attempts)]
        out: list[Attempt | None] = [None] * len(jobs)
        todo: queue.Queue[int] = queue.Queue()
        for i in range(len(jobs)):
            todo.put(i)
        with _Progress(label, len(jobs), progress) as bar:

            def worker(w: int) -> None:
                policy = policy_factory()
                env = self.env(w)
                while True:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    spec, k = jobs[i]
                    a = run_episode(env, spec, policy, k)
                    out[i] = a
                    self._count(a)
                    bar.advance(a)

            threads = [
                threading.Thread(target=worker, args=(w,), name=f"miniwob-{w}")
                for w in range(min(self.size, len(jobs)))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert all(a is not None for a in out)
        return out  # type: ignore[return-value]

    def _count(self, a: Attempt) -> None:
        if a.verdict.reason == "env_error":
            with self._lock:
                self.crashes += 1

    # ---- model policies: every active episode decided in one batched call ---------------------------------------

    def run_lockstep(
        self,
        specs: Sequence[TaskSpec],
        decide: BatchPolicy,
        attempts: int = 1,
        policy_name: str = "model",
        progress: bool = True,
        label: str = "MiniWoB++ rollouts",
    ) -> list[Attempt]:
        """Attempts 0..attempts-1 of every spec with a batched policy: up to `size` episodes run at once; each
        tick calls `decide` once with every active episode's PolicyStep, then steps the browsers in parallel.
        Returned in (spec, attempt) order."""
        jobs: list[Job] = [(s, k) for s in specs for k in range(attempts)]
        out: list[Attempt | None] = [None] * len(jobs)
        nxt = 0

        @dataclass
        class Slot:
            job: int
            env: MiniwobEnv
            steps: list[AttemptStep]
            hist: list[tuple[str, str, str]]
            extras: list[Any]
            step_s: list[float]
            clock: _Timeline
            t0: float
            reward: float = 0.0

        def start(w: int, i: int) -> Slot | None:
            spec, k = jobs[i]
            env = self.env(w)
            t0 = time.perf_counter()
            try:
                env.reset(spec)
            except BrowserDied as e:
                out[i] = failed_attempt(spec, policy_name, k, "env_error", str(e))
                return None
            assert env.task is not None
            return Slot(i, env, [], [], [], [], _Timeline(env.task.task_id, policy_name, k, 1.0), t0)

        slots: dict[int, Slot] = {}
        with _Progress(label, len(jobs), progress) as bar, ThreadPoolExecutor(self.size) as ex:

            def fill() -> None:
                nonlocal nxt
                while nxt < len(jobs) and len(slots) < self.size:  # until every free browser has an episode
                    free = [w for w in range(self.size) if w not in slots]
                    starts = []
                    while free and nxt < len(jobs):
                        starts.append((free.pop(0), nxt))
                        nxt += 1
                    for (w, i), s in zip(starts, ex.map(lambda wi: start(*wi), starts)):
                        if s is None:
                            self._count(out[i])  # type: ignore[arg-type]
                            bar.advance(out[i])  # type: ignore[arg-type]
                        else:
                            slots[w] = s

            fill()
            while slots:
                order = sorted(slots)
                batch = [
                    PolicyStep(
                        slots[w].env.task,
                        jobs[slots[w].job][1],
                        len(slots[w].steps),
                        slots[w].env.observation().text,
                        slots[w].env.observation().screenshot,
                        tuple(slots[w].hist),
                    )  # fmt: skip
                    for w in order
                ]
                try:
                    answers = list(decide(batch))
                    if len(answers) != len(batch):
                        raise ValueError(f"decide returned {len(answers)} answers for {len(batch)} steps")
                except Exception as e:  # noqa: BLE001 - a policy bug fails the attempts in flight, not the run
                    for w in order:
                        s = slots.pop(w)
                        spec, k = jobs[s.job]
                        out[s.job] = failed_attempt(
                            spec, policy_name, k, "policy_error", f"{type(e).__name__}: {e}", tuple(s.steps)
                        )
                        bar.advance(out[s.job])  # type: ignore[arg-type]
                    fill()
                    continue

                def do(w_ans: tuple[int, tuple[Any, ...]]) -> tuple[int, Any, float]:
                    w, ans = w_ans
                    ts = time.perf_counter()
                    r = slots[w].env.step(str(ans[1]))
                    return w, r, time.perf_counter() - ts

                obs_before = {w: slots[w].env.observation() for w in order}
                for w, r, dt in ex.map(do, list(zip(order, answers))):
                    s, ans = slots[w], answers[order.index(w)]
                    thought, action = str(ans[0]), str(ans[1])
                    o = obs_before[w]
                    t_start, t_action, t_end = s.clock.next(thought, action)
                    s.steps.append(
                        AttemptStep(
                            thought=thought,
                            action=action,
                            observation=o.text,
                            effect=r.info.get("error") or r.info.get("effect", ""),
                            reward=r.reward,
                            t_start=t_start,
                            t_action=t_action,
                            t_end=t_end,
                            screenshot=o.screenshot,
                        )  # fmt: skip
                    )
                    s.hist.append((o.text, thought, action))
                    s.extras.append(ans[2] if len(ans) > 2 else None)
                    s.step_s.append(round(dt, 4))
                    s.reward = r.reward
                    if r.done:
                        a = _finish(s.env, policy_name, jobs[s.job][1], s.steps, s.reward, s.t0, s.step_s, s.extras)
                        out[s.job] = a
                        self._count(a)
                        bar.advance(a)
                        del slots[w]
                fill()
        assert all(a is not None for a in out)
        return out  # type: ignore[return-value]

    def run_policy(
        self, specs: Sequence[TaskSpec], policy: Callable[[PolicyStep], Any], attempts: int = 1, **kw: Any
    ) -> list[Attempt]:
        """run_lockstep for a per-step callable: policy(step) -> action string or (thought, action[, extra])."""
        return self.run_lockstep(specs, per_step(policy), attempts, **kw)

    # ---- training's Environment protocol (training/rollout.py) --------------------------------------------------

    def env_factory(self, spec: TaskSpec) -> Callable[[], SlotEnv]:
        """A make_env for training.rollout.TaskInfo: each call binds the next slot (round-robin). Run at most
        `size` trajectories at a time (chunk run_episodes calls), or a slot is reused mid-episode and the older
        episode's next step raises."""

        def make() -> SlotEnv:
            with self._lock:
                slot = self._next_slot
                self._next_slot = (self._next_slot + 1) % self.size
            return SlotEnv(self, slot, spec)

        return make


_TERMINATION = {
    "finished": "finished",
    "ended": "finished",
    "step_limit": "step_limit",
    "unreadable_action": "unreadable_action",
    "env_error": "finished",
}


class SlotEnv:
    """training.rollout.Environment over one pool slot: reset() -> text, step(a) -> (text, done, termination),
    verify() -> (passed, reason). A browser crash ends the episode (passed False, reason env_error)."""

    def __init__(self, pool: BrowserPool, slot: int, spec: TaskSpec) -> None:
        self.pool, self.slot, self.spec = pool, slot, spec
        self.epoch = -1
        self.env = pool.env(slot, spec)
        self._failed: tuple[bool, str] | None = None

    def _check(self) -> None:
        if self.pool._slot_epoch[self.slot] != self.epoch:
            raise RuntimeError(
                f"pool slot {self.slot} was reused while this episode ran: run at most pool.size={self.pool.size} trajectories at a time"
            )

    def reset(self) -> str:
        with self.pool._lock:
            self.pool._slot_epoch[self.slot] += 1
            self.epoch = self.pool._slot_epoch[self.slot]
        try:
            return self.env.reset(self.spec).text
        except BrowserDied as e:
            self._failed = (False, "env_error")
            self.pool.crashes += 1
            return f'window "{self.spec.name}" error: {e}'

    def step(self, action: str) -> tuple[str, bool, str | None]:
        self._check()
        if self._failed is not None:
            return "", True, "finished"
        r = self.env.step(action)
        if r.done and r.info.get("outcome") == "env_error":
            self.pool.crashes += 1
        return (
            r.observation.text,
            r.done,
            (_TERMINATION.get(r.info.get("outcome") or "", "finished") if r.done else None),
        )

    def verify(self) -> tuple[bool, str]:
        if self._failed is not None:
            return self._failed
        v = self.env.verify()
        return bool(v.passed), v.reason


class _Progress:
    """A rich progress bar with passes, browser crashes and episodes/s (silent when disabled)."""

    def __init__(self, label: str, total: int, enabled: bool) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.n = self.passed = self.crashed = 0
        self._lock = threading.Lock()
        self._p: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
            )
            self._p.__enter__()
            self._t = self._p.add_task(self.label, total=self.total, stats="")
            self._t0 = time.perf_counter()
        return self

    def advance(self, a: Attempt) -> None:
        with self._lock:
            self.n += 1
            self.passed += int(a.passed)
            self.crashed += int(a.verdict.reason == "env_error")
            if self._p is not None:
                rate = self.n / max(1e-9, time.perf_counter() - self._t0)
                stats = f"passed {self.passed}/{self.n}  crashes {self.crashed}  {rate:.1f} ep/s"
                self._p.update(self._t, advance=1, stats=stats)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(None, None, None)
