"""Acting on two cores (training/procs.py): a helper process acts on its share of the tasks with the caller's
weights, and the caller gets back what one process would have produced, in the same order, with its own TaskInfos;
what cannot travel acts in-process; a helper whose parent is killed does not outlive it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from training.config import EvalConfig
from training.envs import heldout_tasks, training_tasks
from training.evaluate import evaluate
from training.procs import MIN_TASKS_PER_PROCESS, acting_processes, split_episodes, travels
from training.rollout import run_episodes


def _signature(trajs) -> list:
    return [(t.task.task_id, t.attempt, t.passed, [s.response_ids for s in t.steps]) for t in trajs]


def test_two_processes_evaluate_exactly_as_one(tiny_policy) -> None:
    many = heldout_tasks(2)[: 2 * MIN_TASKS_PER_PROCESS]  # enough for a helper: EvalConfig.processes=2 splits them
    one = evaluate(tiny_policy, many, EvalConfig(max_new_tokens=24))
    two = evaluate(tiny_policy, many, EvalConfig(max_new_tokens=24, processes=2))
    assert two.passed == one.passed and two.steps == one.steps and two.policy_version == one.policy_version
    tasks = many[:12]
    greedy = dict(attempts=1, temperature=0.0, max_new_tokens=24)
    ref = run_episodes(tiny_policy.model, tiny_policy.tokenizer, tasks, policy_version=tiny_policy.version, **greedy)
    got = split_episodes(tiny_policy, tasks, 2, min_tasks=1, **greedy)
    assert _signature(got) == _signature(ref)  # the same tokens, task by task, in task order
    assert all(g.task is t for g, t in zip(got, tasks, strict=True))  # the caller's own TaskInfos
    assert {g.policy_version for g in got} == {tiny_policy.version}


def test_sampled_attempts_come_back_in_task_then_attempt_order_with_the_callers_weights(tiny_policy) -> None:
    import torch

    tasks = training_tasks(5, 3, levels=[1])
    with torch.no_grad():  # weights that differ from the policy folder's: the helper must act with these
        for p in tiny_policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    got = split_episodes(tiny_policy, tasks, 2, min_tasks=1, attempts=3, temperature=1.0, max_new_tokens=24, seed=4)
    assert [(g.task.task_id, g.attempt) for g in got] == [(t.task_id, a) for t in tasks for a in range(3)]
    from training.data import next_token_logprobs

    for tr in (got[3], got[4]):  # task 1 acted in the helper (tasks are dealt out in turn)
        s = tr.steps[0]
        ids = torch.tensor([s.prompt_ids + s.response_ids])
        with torch.no_grad():
            lp = next_token_logprobs(tiny_policy.model, ids, torch.ones_like(ids))[0, len(s.prompt_ids) - 1 :]
        assert torch.allclose(lp, torch.tensor(s.logprobs), atol=1e-4)


def test_the_number_of_processes_follows_from_the_task_count_alone() -> None:
    # a part samples with a seed of its own, so whether a helper is used must not depend on timing
    assert acting_processes(2 * MIN_TASKS_PER_PROCESS - 1, 2) == 1  # too few for a helper's start to pay
    assert acting_processes(2 * MIN_TASKS_PER_PROCESS, 2) == 2
    assert acting_processes(10_000, 2) == 2 and acting_processes(10_000, 1) == 1 and acting_processes(0, 4) == 1
    assert acting_processes(5, 2, min_tasks=1) == 2


def test_what_cannot_travel_acts_in_this_process(tiny_policy) -> None:
    tasks = training_tasks(3, 5, levels=[1])
    local = [replace(t, make_env=lambda t=t: t.make_env()) for t in tasks]  # a lambda does not pickle
    assert travels(tiny_policy, tasks, {}) and not travels(tiny_policy, local, {})
    assert not travels(tiny_policy, tasks, {"reviewer": lambda info: None})
    greedy = dict(attempts=1, temperature=0.0, max_new_tokens=24)
    got = split_episodes(tiny_policy, local, 2, min_tasks=1, **greedy)
    ref = run_episodes(tiny_policy.model, tiny_policy.tokenizer, local, **greedy)
    assert _signature(got) == _signature(ref)


_ORPHAN = """
import os, sys
from training.procs import helpers, warm_helpers
warm_helpers(2)
print(helpers(1).submit(os.getpid).result(), flush=True)
os._exit(0)  # like SIGKILL: no atexit, no pool shutdown
"""


@pytest.mark.timeout(120)
def test_a_helper_exits_when_its_parent_dies_without_shutting_it_down() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", _ORPHAN], cwd=root, capture_output=True, text=True, timeout=100)
    pid = int(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}"), f"helper {pid} outlived its parent"
