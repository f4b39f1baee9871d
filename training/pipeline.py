"""The round's training, as plain functions: which jobs are due, run one job on a backend, build the first policy.

The round engine (flows/stages.py) calls these; nothing here knows about Prefect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow.compute as pc

from schemas.prompt import PromptConfig
from storage.piles import read_pile
from training.backend import CommandBackend
from training.base import sandbox_texts
from training.config import (
    CTConfig,
    EvalConfig,
    ModelConfig,
    RLConfig,
    SamplingConfig,
    SearchPracticeConfig,
    SFTConfig,
    WarmupConfig,
    to_dict,
)
from training.ct import ct_due, ct_job
from training.data import PILE_STEP_FIELDS
from training.model import Policy
from training.rl import TasksFn, rl_job
from training.rollout_server import RolloutServer
from training.runs import JobResult
from training.sft import sft_job


@dataclass(frozen=True)
class FlywheelConfig:
    """Everything a round's training needs. `backend` is "builtin" or a command template (training/backend.py)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)  # copy warm-up of a fresh model (off by default)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    ct: CTConfig = field(default_factory=CTConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    cold_sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=300))
    rl: RLConfig = field(default_factory=RLConfig)
    search: SearchPracticeConfig = field(default_factory=SearchPracticeConfig)  # RoundConfig.rl_mode "search"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ct_every: int = 2
    rl_every: int = 1
    max_new_tokens: int = 64
    backend: str = "builtin"

    def as_dict(self) -> dict:
        return to_dict(self)


@dataclass(frozen=True)
class TrainStep:
    stage: str  # ct | sft | rl


def train_steps(round: int, cfg: FlywheelConfig) -> list[TrainStep]:
    """The jobs due in `round`: CT every `ct_every` rounds, then SFT, then RL (every `rl_every` rounds)."""
    steps = [TrainStep("ct")] if ct_due(round, cfg.ct_every) else []
    steps.append(TrainStep("sft"))
    if cfg.rl_every > 0 and round > 0 and round % cfg.rl_every == 0:
        steps.append(TrainStep("rl"))
    return steps


def pile_texts(lake, limit: int = 5000) -> list[str]:  # noqa: ANN001
    """Instructions, observations, thoughts and actions from both piles: the tokenizer's training text."""
    out: list[str] = []
    for table in ("sft", "ct"):
        ids = lake.read(table, ["episode_id"]).column("episode_id").slice(0, limit).combine_chunks()
        rows = read_pile(lake, table, ["instruction", "steps"], filter=pc.field("episode_id").isin(ids),
                         step_fields=PILE_STEP_FIELDS).to_pylist()  # fmt: skip
        for r in rows:
            out.append(r["instruction"])
            for s in r["steps"] or []:
                out += [x for x in (s.get("observation"), s.get("thought"), s.get("action")) if x]
    return out


def create_policy(lake, cfg: FlywheelConfig, on_step: Callable[[int, float], None] | None = None) -> Policy:  # noqa: ANN001
    """A fresh policy: tokenizer trained on the piles' and the sandbox's text, model from the config (or a local
    pretrained folder, `cfg.model.pretrained`), then the copy warm-up on that same text when configured."""
    from training.warmup import copy_warmup

    texts = pile_texts(lake) + sandbox_texts()
    policy = Policy.create(texts, cfg.model)
    if not cfg.model.pretrained:
        copy_warmup(policy, texts, cfg.warmup, on_step)
    return policy


def run_training(
    lake,  # noqa: ANN001
    round: int,
    stage: str,
    base: str | Policy | None,
    cfg: FlywheelConfig,
    on_step: Callable[[int, float], None] | None = None,
    sft_cfg: SFTConfig | None = None,
    rl_tasks: TasksFn | None = None,
    known_good: tuple | None = None,
    rollouts: RolloutServer | None = None,
) -> tuple[JobResult, Policy | None]:
    """Run one job on the configured backend; the checkpoint and the training_runs row are written either way.
    RL plays `rl_tasks(n, seed)` (default: the sandbox's training tasks; training/envs.py has the other backends)
    after scoring `known_good` (a task and a solution's actions), when given, generating its rollouts through
    `rollouts` (a policy server, training/rollout_server.py) when given."""
    if cfg.backend != "builtin":
        return CommandBackend(cfg.backend).run(lake, stage, round, base, cfg.prompt)
    if base is None:
        base = create_policy(lake, cfg, on_step)
    if stage == "ct":
        return ct_job(lake, round, base, cfg.ct, cfg.prompt, on_step=on_step)
    if stage == "sft":
        return sft_job(lake, round, base, sft_cfg or cfg.sft, cfg.prompt, on_step=on_step)
    if stage == "rl":
        from training.envs import training_tasks
        from training.rewards import verifier_reward

        tasks_fn = rl_tasks or training_tasks

        def on_iter(i: int, stats: dict) -> None:
            if on_step:
                on_step(i, float(stats.get("reward_mean", 0.0)))

        return rl_job(lake, round, base, lambda n, seed: tasks_fn(n, 100_000 + seed), verifier_reward(), cfg.rl,
                      cfg.prompt, cfg.max_new_tokens, on_iter, known_good, rollouts)  # fmt: skip
    raise ValueError(f"unknown training stage {stage!r}; expected ct, sft or rl")


__all__ = [
    "FlywheelConfig",
    "TrainStep",
    "train_steps",
    "run_training",
    "create_policy",
    "SamplingConfig",
    "EvalConfig",
]
