"""SFT: the loss only on the agent's thought and action tokens, on the SFT pile (episodes that passed V(s))."""

from __future__ import annotations

from schemas.prompt import PromptConfig
from training.config import SFTConfig
from training.data import batches
from training.jobs import ProgressFn, pile_job
from training.loop import train_lm
from training.model import Policy
from training.prompt import Encoded
from training.runs import JobResult


def train_sft(
    policy: Policy, items: list[Encoded], cfg: SFTConfig = SFTConfig(), on_step: ProgressFn | None = None
) -> tuple[list[float], int]:
    """Plain function: `cfg.steps_for(len(items))` masked-loss steps over `items`; returns (losses, tokens)."""
    steps = cfg.steps_for(len(items))
    it = batches(items, cfg.batch_size, steps, policy.tokenizer.pad_token_id, seed=cfg.seed)
    return train_lm(policy.model, it, steps, cfg.optim, on_step)


def sft_job(
    lake,  # noqa: ANN001
    round: int,
    base: str | Policy,
    cfg: SFTConfig = SFTConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    pile_version: int | None = None,
    on_step: ProgressFn | None = None,
) -> tuple[JobResult, Policy]:
    """Loss on the agent's tokens only, on the SFT pile, episodes per task capped, plus the grounding rehearsal
    (see training.jobs.pile_job)."""
    return pile_job(
        lake,
        round,
        "sft",
        base,
        cfg,
        prompt_cfg,
        pile_version,
        on_step,
        train_sft,
        agent_only=True,
        max_per_task=cfg.max_episodes_per_task,
        grounding=cfg.grounding,
    )
