"""Rollouts beside learning (UI-TARS-2's asynchronous rollouts): worker processes keep producing attempts with the
newest weights they were sent while the learner updates, and the learner drops what is older than the maximum lag.

Any `concurrent.futures.Executor` runs the workers: on one machine a pool of spawned processes
(`training.procs.local_executor`),
on a cluster a Dask client's executor (`distributed.Client(address).get_executor()`, the cluster prefect-dask's
`DaskTaskRunner` uses) or Ray's. No scheduler of our own: a job is one picklable call, `collect(job)`.

A job carries everything a fresh worker needs: the policy folder as bytes (once per worker, cached by its hash),
the weights of the version to act with, the environment backend's name and its own task objects. The worker
rebuilds its TaskInfos from those (`EnvBackend.task_info`), acts, and sends the trajectories back without their
environment factories; the learner puts its own TaskInfos back in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import torch

from schemas.prompt import PromptConfig
from training.model import Policy
from training.procs import PolicyBlob, local_executor, policy_with
from training.rollout import TaskInfo, Trajectory


@dataclass(frozen=True)
class CollectJob:
    """One batch of acting: `kind` "episode" (G attempts per task) or "step" (training.branch's step groups)."""

    blob: PolicyBlob
    weights: dict[str, torch.Tensor]  # the model's state_dict of policy step `version`
    version: int
    env: str
    env_tasks: tuple[str, ...] | None
    payloads: list[Any]  # the backend's own task objects (picklable), in order
    kind: str
    seed: int
    params: dict[str, Any] = field(default_factory=dict)  # the sampler's and the branching's options


@dataclass
class Collected:
    """What a worker sends back: trajectories (and step-group candidates) whose tasks are indexes into the job's
    payloads, the version that acted, and the worker's own timing."""

    version: int
    trajectories: list[Trajectory]
    candidates: list[Any]
    stats: dict[str, Any]
    task_index: list[int]  # per trajectory, the index of its task in the job's payloads
    seconds: float = 0.0
    pid: int = 0


def task_infos(env: str, env_tasks: Sequence[str] | None, payloads: Sequence[Any]) -> list[TaskInfo]:
    """The backend's TaskInfos for its own task objects (a backend without `task_info` cannot act in workers)."""
    from training.envs import env_backend

    backend = env_backend(env, env_tasks)
    make = getattr(backend, "task_info", None)
    if make is None:
        raise ValueError(f"environment {env!r} cannot run rollouts in workers: its backend has no task_info(payload)")
    return [make(p) for p in payloads]


def act(
    model,  # noqa: ANN001
    tokenizer,  # noqa: ANN001
    infos: Sequence[TaskInfo],
    kind: str,
    params: dict[str, Any],
    seed: int,
    version: int,
    policy_version: str,
) -> tuple[list[Trajectory], list[Any], dict[str, Any]]:
    """One batch of acting, in-process or in a worker: G attempts per task ("episode") or step groups ("step")."""
    from training.branch import step_groups
    from training.rollout import run_episodes

    p = dict(params)
    prompt_cfg = p.pop("prompt_cfg", PromptConfig())
    if kind == "step":
        cands, trajs, stats = step_groups(model, tokenizer, infos, prompt_cfg=prompt_cfg, policy_version=policy_version,
                                          seed=seed, policy_step=version, **p)  # fmt: skip
        return trajs, cands, stats
    trajs = run_episodes(model, tokenizer, infos, prompt_cfg=prompt_cfg, policy_version=policy_version, seed=seed,
                         policy_step=version, **p)  # fmt: skip
    return trajs, [], {}


def collect(job: CollectJob) -> Collected:
    """Run in a worker: act with the job's weights on its tasks; return the trajectories without their tasks."""
    import time

    t0 = time.perf_counter()
    policy = policy_with(job.blob, job.weights)
    infos = task_infos(job.env, job.env_tasks, job.payloads)
    trajs, cands, stats = act(policy.model, policy.tokenizer, infos, job.kind, job.params, job.seed, job.version,
                              f"step-{job.version}")  # fmt: skip
    index = {id(t): i for i, t in enumerate(infos)}
    where = [index[id(tr.task)] for tr in trajs]
    for tr in trajs:
        tr.task = None  # type: ignore[assignment]  # its make_env does not travel; the learner re-attaches its own
    return Collected(job.version, trajs, cands, stats, where, time.perf_counter() - t0, os.getpid())


def attach(got: Collected, infos: Sequence[TaskInfo]) -> list[Trajectory]:
    """The learner's side of `collect`: the trajectories with the learner's own TaskInfos back in place."""
    for tr, i in zip(got.trajectories, got.task_index):
        tr.task = infos[i]
    return got.trajectories


class DaskExecutor(Executor):
    """The executor of a Dask client connected to `address`; shutting it down cancels what is pending and closes
    the client (the cluster itself stays up: it is the user's)."""

    def __init__(self, address: str) -> None:
        from distributed import Client

        self.client = Client(address)
        self.inner = self.client.get_executor()

    def submit(self, fn, /, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201 - Executor's signature
        return self.inner.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait)
        self.client.close()


def executor_for(address: str | None, workers: int = 1, threads: int = 1) -> Executor:
    """`None` or "local": local worker processes; "tcp://HOST:PORT": the Dask cluster's scheduler there."""
    if address in (None, "", "local"):
        return local_executor(workers, threads)
    if address.startswith("tcp://"):
        return DaskExecutor(address)
    raise ValueError(f"rollout workers: 'local' or a Dask scheduler address tcp://HOST:PORT, not {address!r}")


@dataclass
class Batch:
    """A batch of acting as the learner receives it: its tasks, what was collected and by which policy step."""

    infos: list[TaskInfo]
    trajectories: list[Trajectory]
    candidates: list[Any]
    stats: dict[str, Any]
    version: int  # the policy step that acted
    seconds: float  # acting time (in the worker, for a pool)
    waited: float  # how long the learner waited for it


class Rollouts:
    """Batches of acting for the learner, in submission order.

    In-process (`executor` None) a batch acts when it is taken, with the policy as it is then: no overlap, no lag;
    or, with a `server` (training/rollout_server.py), through a policy server holding the learner's weights of the
    last sync, as old as the sync interval allows.
    With an executor, `depth` batches are kept in flight, each acting with a copy of the weights of the policy step it
    was submitted at, so the learner updates while workers act; the batch taken is up to `depth - 1` steps old."""

    def __init__(self, policy: Policy, kind: str, params: dict[str, Any], executor: Executor | None = None,
                 env: str = "sandbox", env_tasks: Sequence[str] | None = None, depth: int = 2,
                 server: Any = None) -> None:  # fmt: skip
        self.policy, self.kind, self.params, self.executor = policy, kind, params, executor
        self.server = server  # training.rollout_server.ServedActor: in-process batches act through a policy server
        self.env, self.env_tasks = env, tuple(env_tasks) if env_tasks else None
        self.depth = depth if executor is not None else 1
        self.blob = PolicyBlob.of(policy) if executor is not None else None
        self.pending: list[tuple[list[TaskInfo], int, int, Any]] = []

    def submit(self, infos: Sequence[TaskInfo], version: int, seed: int) -> None:
        fut = None
        if self.executor is not None:
            weights = {k: v.detach().clone() for k, v in self.policy.model.state_dict().items()}
            job = CollectJob(self.blob, weights, version, self.env, self.env_tasks,  # type: ignore[arg-type]
                             [i.payload for i in infos], self.kind, seed, self.params)  # fmt: skip
            fut = self.executor.submit(collect, job)
        self.pending.append((list(infos), version, seed, fut))

    def take(self, version: int, idle: Callable[[], object] | None = None) -> Batch:
        """The oldest batch submitted (acting now, in-process, with policy step `version`). While a worker's batch is
        not back yet, `idle()` is called again and again (the learner's own work: a rehearsal step), so the learner's
        core never waits for the workers'."""
        import time

        infos, v, seed, fut = self.pending.pop(0)
        t0 = time.perf_counter()
        if fut is None:
            actor, step = (self.policy, version) if self.server is None else self.server.at(self.policy, version)
            self.policy.model.eval()
            trajs, cands, stats = act(actor.model, actor.tokenizer, infos, self.kind, self.params, seed, step,
                                      actor.version)  # fmt: skip
            dt = time.perf_counter() - t0
            return Batch(infos, trajs, cands, stats, step, dt, 0.0)
        while idle is not None and not fut.done():
            idle()
        got: Collected = fut.result()
        waited = time.perf_counter() - t0
        for tr in attach(got, infos):
            tr.policy_version = self.policy.version
        return Batch(infos, got.trajectories, got.candidates, got.stats, v, got.seconds, waited)

    def close(self) -> None:
        for *_, fut in self.pending:
            if fut is not None:
                fut.cancel()
        self.pending.clear()
