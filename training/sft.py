"""SFT: the loss only on the agent's thought and action tokens, on the SFT pile (episodes that passed V(s))."""

from __future__ import annotations

import time

from training.config import PromptConfig, SFTConfig, to_dict
from training.data import batches, encode_all, pile_examples, read_pile
from training.jobs import ProgressFn, finish, resolve_base
from training.loop import train_lm
from training.model import Policy
from training.prompt import Encoded
from training.runs import JobResult


def train_sft(policy: Policy, items: list[Encoded], cfg: SFTConfig = SFTConfig(), on_step: ProgressFn | None = None) -> tuple[list[float], int]:
    """Plain function: `cfg.steps` masked-loss steps over `items`; returns (losses, tokens)."""
    it = batches(items, cfg.batch_size, cfg.steps, policy.tokenizer.pad_token_id, seed=cfg.seed)
    return train_lm(policy.model, it, cfg.steps, cfg.optim, on_step)


def sft_job(
    lake,  # noqa: ANN001
    round: int,
    base: str | Policy,
    cfg: SFTConfig = SFTConfig(),
    prompt_cfg: PromptConfig = PromptConfig(),
    pile_version: int | None = None,
    on_step: ProgressFn | None = None,
) -> tuple[JobResult, Policy]:
    """Read the SFT pile at a recorded version, train, publish the checkpoint, write the training_runs row."""
    t0 = time.perf_counter()
    b = resolve_base(lake, base)
    pile = read_pile(lake, "sft", pile_version)
    examples = pile_examples(pile.rows, prompt_cfg, cfg.max_episodes_per_task, cfg.seed + round)
    if not examples:
        raise ValueError(f"the SFT pile (version {pile.version}) is empty: nothing to train on")
    items = encode_all(b.policy.tokenizer, examples, prompt_cfg)
    losses, tokens = train_sft(b.policy, items, cfg, on_step)
    res = JobResult(
        "sft", round, b.uri, pile_version=pile.version, samples=len(items), tokens=tokens, losses=losses,
        metrics={"episodes": pile.rows.num_rows, "agent_tokens": sum(e.n_agent for e in items)},
        config={"sft": to_dict(cfg), "prompt": to_dict(prompt_cfg)},
    )
    return finish(lake, res, b.policy, t0), b.policy
