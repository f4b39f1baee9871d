"""CT (continual training): next-token loss on every token of the CT pile's text, every k rounds.

Failures are not thrown away: their screens and instructions are still text about the environment. CT runs with
a smaller learning rate than SFT, and SFT follows it in the same round, so the agent's own answers are shaped by
passes only.
"""

from __future__ import annotations

from schemas.prompt import PromptConfig
from training.config import CTConfig
from training.data import batches
from training.jobs import ProgressFn, pile_job
from training.loop import train_lm
from training.model import Policy
from training.prompt import Encoded
from training.runs import JobResult


def ct_due(round: int, every: int) -> bool:
    """CT runs in rounds every, 2*every, ... (never when every <= 0)."""
    return every > 0 and round > 0 and round % every == 0


def train_ct(
    policy: Policy, items: list[Encoded], cfg: CTConfig = CTConfig(), on_step: ProgressFn | None = None
) -> tuple[list[float], int]:
    it = batches(items, cfg.batch_size, cfg.steps, policy.tokenizer.pad_token_id, seed=cfg.seed, all_tokens=True)
    return train_lm(policy.model, it, cfg.steps, cfg.optim, on_step)


def ct_job(
    lake,  # noqa: ANN001
    round: int,
    base: str | Policy,
    cfg: CTConfig = CTConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    pile_version: int | None = None,
    on_step: ProgressFn | None = None,
) -> tuple[JobResult, Policy]:
    """Next-token loss on every token of the CT pile (see training.jobs.pile_job)."""
    return pile_job(lake, round, "ct", base, cfg, prompt_cfg, pile_version, on_step, train_ct, agent_only=False)
