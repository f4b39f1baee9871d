"""A deterministic, verifiable GUI sandbox for rollouts, RL and scripted demonstrations (docs/sandbox.md).

from sandbox import Env, make_task, training_tasks, heldout_tasks
"""

from sandbox.env import Env, Observation, StepResult
from sandbox.heldout import heldout_tasks, training_tasks
from sandbox.tasks import Task, make_task

__all__ = ["Env", "Observation", "StepResult", "Task", "heldout_tasks", "make_task", "training_tasks"]
