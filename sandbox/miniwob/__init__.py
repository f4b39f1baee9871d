"""MiniWoB++ (the `miniwob` package's web tasks) in headless Chromium behind the sandbox's environment API
(docs/miniwob.md).

    from sandbox.miniwob import MiniwobEnv, BrowserPool, Expert, TaskSpec, training_specs, heldout_specs
    from sandbox.miniwob import demonstrations, describe, rollouts, evaluate   # the flywheel round's side
"""

from sandbox.miniwob.demonstrators import Expert, Novice
from sandbox.miniwob.env import MiniwobEnv
from sandbox.miniwob.pool import BrowserPool, PolicyStep, SlotEnv, per_step, run_episode
from sandbox.miniwob.runs import Evaluation, demonstrations, describe, evaluate, rollouts
from sandbox.miniwob.tasks import TASKS, TaskSpec, heldout_specs, to_task, training_specs

__all__ = [
    "TASKS", "BrowserPool", "Evaluation", "Expert", "MiniwobEnv", "Novice", "PolicyStep", "SlotEnv", "TaskSpec",
    "demonstrations", "describe", "evaluate", "heldout_specs", "per_step", "rollouts", "run_episode", "to_task",
    "training_specs",
]  # fmt: skip
