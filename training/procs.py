"""Worker processes on this machine, and a policy shipped to them: the plumbing that rollout workers
(training/workers.py), search (training/search.py) and acting on two cores (`split_episodes`) share.

Spawn, never fork: deltalake's runtime does not survive a fork. A policy travels as a `PolicyBlob` (its folder as a
tar, named by its hash, loaded once per worker) plus the weights to act with.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import torch

from training.model import Policy
from training.rollout import TaskInfo, Trajectory, run_episodes


@dataclass(frozen=True)
class PolicyBlob:
    """A policy folder (model, tokenizer, value head) as a tar, named by its hash: shipped to a worker once."""

    key: str
    data: bytes

    @classmethod
    def of(cls, policy: Policy) -> PolicyBlob:
        with tempfile.TemporaryDirectory() as d:
            policy.save(d)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for name in sorted(os.listdir(d)):
                    tar.add(os.path.join(d, name), arcname=name)
        data = buf.getvalue()
        return cls(hashlib.sha256(data).hexdigest()[:16], data)


_CACHE: dict[str, Policy] = {}


def _policy(blob: PolicyBlob) -> Policy:
    if blob.key not in _CACHE:
        d = tempfile.mkdtemp(prefix="flywheel-worker-")
        with tarfile.open(fileobj=io.BytesIO(blob.data)) as tar:
            tar.extractall(d, filter="data")
        _CACHE.clear()
        _CACHE[blob.key] = Policy.load(d)
    return _CACHE[blob.key]


def policy_with(blob: PolicyBlob, weights: dict[str, torch.Tensor]) -> Policy:
    """The worker's copy of the blob's policy (loaded once) with these weights, in eval mode."""
    policy = _policy(blob)
    policy.model.load_state_dict(weights)
    policy.model.eval()
    return policy


def _worker_init(threads: int) -> None:
    torch.set_num_threads(threads)
    parent = os.getppid()

    def orphaned() -> None:  # a parent killed with SIGKILL never shuts its pool down: its workers would wait forever
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=orphaned, name="parent-watch", daemon=True).start()


def local_executor(workers: int = 1, threads: int = 1) -> Executor:
    """Spawned worker processes on this machine, each with `threads` torch threads; a worker whose parent dies exits
    within a second."""
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_init, initargs=(threads,))


# ----------------------------------------------------------------------------------- acting on two cores
_HELPERS: dict[int, Executor] = {}

#: The fewest tasks a process of `split_episodes` gets: a helper's start (importing torch and the model code, 5-8 s of
#: CPU on 2 cores) is more than acting on a smaller share takes, and the number of processes must follow from the task
#: count alone (a part samples with a seed of its own), never from whether a helper happens to be up.
MIN_TASKS_PER_PROCESS = 32


def acting_processes(n_tasks: int, processes: int, min_tasks: int = MIN_TASKS_PER_PROCESS) -> int:
    """How many processes `split_episodes` acts on `n_tasks` tasks with: at most `processes`, each with at least
    `min_tasks` tasks (one when there are fewer)."""
    return max(1, min(processes, n_tasks // max(1, min_tasks)))


def helpers(n: int) -> Executor:
    """`n` one-thread worker processes kept for the life of this process (started on first use, shut down at exit):
    the other cores of `split_episodes`. A fresh pool per evaluation would pay its start (importing torch and the
    model code, seconds) every time; this one pays it once a process."""
    if n not in _HELPERS:
        import atexit

        _HELPERS[n] = pool = local_executor(n, 1)
        atexit.register(pool.shutdown, wait=False, cancel_futures=True)
    return _HELPERS[n]


def _warm() -> int:
    return os.getpid()  # unpickling this job imported this module, torch and the model code: the point


def warm_helpers(n: int) -> None:
    """Start `split_episodes`' helper processes now: their imports run beside the caller's work, not in the first
    split's time."""
    if n > 1:
        pool = helpers(n - 1)
        for _ in range(n - 1):
            pool.submit(_warm)


def pooled(tasks: Sequence[TaskInfo]) -> bool:
    """Whether these tasks share a pool of environments (a browser pool's `max_concurrent`): they act in-process."""
    return any(t.max_concurrent is not None for t in tasks)


def travels(policy: Any, tasks: Sequence[TaskInfo], params: dict[str, Any]) -> bool:
    """Whether a helper can act on these tasks with this policy and `run_episodes` options: a local text policy (a
    served or vision policy acts in-process), tasks whose environments a helper can build and options it can use (they
    pickle: a reviewer too) and no shared pool of environments (a browser pool's `max_concurrent`)."""
    model = getattr(policy, "model", None)
    if not isinstance(model, torch.nn.Module) or getattr(model, "vision", None) is not None:
        return False  # a served model (training/served.py) is not a module; a vision policy acts on screenshots
    if pooled(tasks):
        return False
    try:
        pickle.dumps((list(tasks), params))
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def act_part(blob: PolicyBlob, weights: dict[str, torch.Tensor], tasks: list[TaskInfo], seed: int,
             params: dict[str, Any]) -> list[Trajectory]:  # fmt: skip
    """In a helper: `run_episodes` with the blob's policy and these weights on these tasks."""
    policy = policy_with(blob, weights)
    return run_episodes(policy.model, policy.tokenizer, tasks, seed=seed, **params)


def split_episodes(
    policy: Policy,
    tasks: Sequence[TaskInfo],
    processes: int,
    *,
    seed: int = 0,
    on_step: Callable[[int], None] | None = None,
    min_tasks: int = MIN_TASKS_PER_PROCESS,
    **params: Any,
) -> list[Trajectory]:
    """`run_episodes` on `processes` processes of one thread each (this one and helpers), the tasks dealt out in
    turn; the trajectories come back in (task, attempt) order, as `run_episodes` returns them, with the caller's
    TaskInfos and the policy's version.

    Why: generating for a small model is many small matrix products, which one thread does nearly as well as two: two
    processes of one thread each took the 280 held-out tasks 1.18x faster than one process on two threads (16
    interleaved pairs, docs/training.md). Progress (`on_step`) counts this process's episodes as they end and a helper's
    when its part comes back. Part i samples with seed `seed + i`; greedy decoding (evaluation) does not sample. One
    process, as before, when `processes` is 1, the policy or tasks cannot travel, or there are fewer than `min_tasks` tasks
    for each process (`acting_processes`)."""
    k = acting_processes(len(tasks), processes, min_tasks)
    if k <= 1 or not travels(policy, tasks, params):
        return run_episodes(policy.model, policy.tokenizer, tasks, policy_version=policy.version, seed=seed,
                            on_step=on_step, **params)  # fmt: skip
    parts = [list(range(i, len(tasks), k)) for i in range(k)]
    blob = PolicyBlob.of(policy)
    weights = {n: v.detach().clone() for n, v in policy.model.state_dict().items()}
    pool = helpers(k - 1)
    futs = [
        pool.submit(act_part, blob, weights, [tasks[j] for j in part], seed + i, params)
        for i, part in enumerate(parts[1:], start=1)
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mine = run_episodes(policy.model, policy.tokenizer, [tasks[j] for j in parts[0]], seed=seed, on_step=on_step,
                            **params)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    attempts = params.get("attempts", 1)
    out: list[Trajectory | None] = [None] * (len(tasks) * attempts)
    for i, part in enumerate(parts):
        trajs = mine if i == 0 else futs[i - 1].result()
        for n, tr in enumerate(trajs):  # (task, attempt) order within the part
            tr.task, tr.policy_version = tasks[part[n // attempts]], policy.version
            out[part[n // attempts] * attempts + tr.attempt] = tr
        if i and on_step is not None:
            on_step(len(trajs))
    return out  # type: ignore[return-value]
