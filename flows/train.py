"""Prefect flows for training: one task per job (CT, SFT, RL), rejection sampling and held-out evaluation.

Thin wrappers over training/: each task opens the lake, runs the plain function and returns a small summary;
checkpoints travel between tasks as object-store URIs, so any task can run in another process or on a GPU work
pool (`run_deployment`). Lake I/O is retried; a training step itself is not (a retry would train twice).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from prefect import flow, task

from storage.lake import Lake
from training.pipeline import FlywheelConfig, TrainStep, run_training, train_steps


@task(retries=2, retry_delay_seconds=5, task_run_name="{stage} round {round}")
def train_task(lake: str, round: int, stage: str, base: str | None, cfg: FlywheelConfig) -> dict[str, Any]:
    """One job; returns its training_runs row (minus the loss curve)."""
    res, _ = run_training(Lake.open(lake), round, stage, base, cfg)
    row = res.to_row()
    row.pop("losses")
    return row


@flow(name="train")
def train(lake: str, round: int, base: str | None = None, cfg: FlywheelConfig | None = None) -> list[dict[str, Any]]:
    """The round's jobs in order (CT when due, SFT, RL), each starting from the previous one's checkpoint."""
    cfg = cfg or FlywheelConfig()
    out = []
    for step in train_steps(round, cfg):
        row = train_task(lake, round, step.stage, base, cfg)
        base = row["output_checkpoint"]
        out.append(row)
    return out


__all__ = ["train", "train_task", "TrainStep", "asdict"]
