"""The language-model training loop shared by CT and SFT: AdamW, warmup then cosine decay, gradient clipping.

Written to be read top to bottom; the only difference between CT and SFT is which tokens the loss mask selects.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import torch

from training.compiled import compiled
from training.config import OptimConfig
from training.data import Batch, masked_nll


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(list(params), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def lr_at(step: int, total: int, cfg: OptimConfig) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def train_lm(
    model,  # noqa: ANN001
    batches: Iterable[Batch],
    steps: int,
    cfg: OptimConfig,
    on_step: Callable[[int, float], None] | None = None,
    log_every: int = 0,
    device: str = "cpu",
) -> tuple[list[float], int]:
    """Minimise the masked next-token loss over `batches` (moved to `device`, where the model is) for `steps` steps, or
    until `cfg.stop_at`; returns (loss per step, tokens seen)."""
    from training.precision import choose

    bf16 = choose(cfg.bf16, model).bf16  # True / False as configured; "auto": measured on this machine, cached
    model.train()
    opt = make_optimizer(model.parameters(), cfg)
    losses: list[float] = []
    tokens = 0
    t0 = time.time()
    allowed = (cfg.stop_at - t0) if cfg.stop_at is not None else None
    with compiled(model, cfg.compile):
        for step, batch in enumerate(batches):
            at = step
            if allowed is not None:  # the clock's share of the run, when it is ahead of the steps'
                now = time.time()
                if step >= cfg.warmup_steps and now >= cfg.stop_at:
                    break
                at = max(step, int(steps * (now - t0) / allowed) if allowed > 0 else steps)
            for g in opt.param_groups:
                g["lr"] = lr_at(at, steps, cfg)
            if device != "cpu":
                batch = Batch(
                    *(
                        t.to(device, non_blocking=True)
                        for t in (batch.input_ids, batch.attention_mask, batch.loss_mask)
                    ),
                    batch.images,
                )
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16):
                loss = masked_nll(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            losses.append(float(loss.detach()))
            tokens += batch.n_tokens
            if on_step:
                on_step(step, losses[-1])
            if log_every and step % log_every == 0:
                print(f"step {step} loss {losses[-1]:.4f}", flush=True)
    model.eval()
    return losses, tokens
