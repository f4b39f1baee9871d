"""A tiny round configuration and a landing area with demonstrator data, for the round-flow tests."""

from __future__ import annotations

import json
from pathlib import Path

TINY_ROUND = {
    "expert_tasks": 24,
    "novice_tasks": 6,
    "interactive_tasks": 2,
    "think_aloud": 0,
    "eval_per_cell": 1,
    "flywheel": {
        "model": {"vocab_size": 600, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "max_number": 640},
        "cold_sft": {"steps": 6, "batch_size": 8},
        "sft": {"steps": 4, "batch_size": 8},
        "ct": {"steps": 3, "batch_size": 8},
        "rl": {"iterations": 1, "tasks_per_iter": 4, "group_size": 2, "value_pretrain_steps": 2, "minibatch_size": 8,
               "ppo_epochs": 1},
        "sampling": {"tasks": 6, "attempts": 2, "max_new_tokens": 24},
        "eval": {"max_new_tokens": 24},
        "max_new_tokens": 24,
        "ct_every": 2,
    },
}


def write_config(path: Path, **flywheel: object) -> Path:
    cfg = {**TINY_ROUND, "flywheel": {**TINY_ROUND["flywheel"], **flywheel}}
    path.write_text(json.dumps(cfg))
    return path


def write_landing(lake, landing: Path, n_expert: int = 24, n_novice: int = 6, n_inter: int = 2) -> Path:  # noqa: ANN001
    """Demonstrator attempts as upload files: landing/rollouts/*.jsonl and landing/annotations/*.json."""
    from sandbox.demonstrators import Expert, Interactive, Novice
    from sandbox.parallel import run_many
    from sandbox.tasks import training_tasks
    from training.demo import write_annotations_with_shots, write_rollouts_with_shots

    tasks = training_tasks(n_expert + n_novice + n_inter, seed=0)
    (landing / "rollouts").mkdir(parents=True, exist_ok=True)
    (landing / "annotations").mkdir(parents=True, exist_ok=True)
    write_rollouts_with_shots(lake, run_many(tasks[:n_expert], Expert, screenshots=True), landing / "rollouts" / "expert.jsonl", "expert")
    write_rollouts_with_shots(lake, run_many(tasks[n_expert:n_expert + n_novice], Novice, screenshots=True),
                              landing / "rollouts" / "novice.jsonl", "novice")  # fmt: skip
    inter = run_many(tasks[n_expert + n_novice:], Interactive, screenshots=True)
    write_annotations_with_shots(lake, inter, landing / "annotations" / "session.json")
    return landing
