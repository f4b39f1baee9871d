"""Fitting a run of rounds into a wall-time budget on the machine it runs on.

The demo's sizes were tuned on a 2-core machine where one SFT step of the base model took about `REF_STEP_S`; there
the 3-round demo took `REF_MINUTES`, `REF_SFT_MINUTES` of it in SFT (the stage that grows with the piles) and the
rest in sampling, annotation, evaluation and bookkeeping, which scale with the same CPU. `calibrate` times a few
real SFT steps of the configured model at the demo's batch shape, in the precision training will use, and `fit`
projects the run's time from the ratio and, if it would not fit, scales what can be scaled without touching what is
measured: the SFT passes and step caps (the held-out set, the annotation and sampling sizes stay, so rounds remain
comparable). The decision is printed and recorded in round 0's breakdown (`budget`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

from flows.config import RoundConfig

#: Where the shipped sizes were measured: seconds per SFT step (batch 16, ~300 tokens), the 3-round demo's
#: minutes, and the minutes of it spent in SFT (docs/training.md).
REF_STEP_S = 0.21
REF_MINUTES = 17.5
REF_SFT_MINUTES = 12.8
REF_ROUNDS = 3
MIN_SCALE = 0.25  # below this the rounds would not learn enough to show anything


@dataclass(frozen=True)
class Fit:
    step_s: float
    precision: dict[str, Any]
    budget_min: float
    estimate_min: float  # at full size
    scale: float  # applied to the SFT passes and step caps (1: unchanged)
    fitted_min: float

    def why(self) -> str:
        base = (f"an SFT step takes {self.step_s:.3f} s here ({self.precision.get('precision')}, "
                f"{self.precision.get('source')}; {REF_STEP_S:.2f} s where the sizes were tuned): about "
                f"{self.estimate_min:.1f} min at full size for a {self.budget_min:.0f}-minute budget")  # fmt: skip
        if self.scale >= 1:
            return base + ": full sizes"
        return base + f": SFT passes and step caps scaled to {100 * self.scale:.0f}% (about {self.fitted_min:.1f} min)"

    def as_dict(self) -> dict[str, Any]:
        return {"step_s": round(self.step_s, 4), "precision": self.precision, "budget_min": self.budget_min,
                "estimate_min": round(self.estimate_min, 1), "scale": round(self.scale, 3),
                "fitted_min": round(self.fitted_min, 1)}  # fmt: skip


def calibrate(cfg: RoundConfig, steps: int = 5, seq: int = 300) -> tuple[float, dict[str, Any]]:
    """Seconds per SFT step of the configured model on this machine (a random batch of the demo's shape, full
    optimizer steps on a throwaway copy), and the precision it ran in."""
    import copy

    import torch

    from training.config import OptimConfig
    from training.loop import make_optimizer
    from training.model import Policy
    from training.precision import choose

    m = cfg.flywheel.model
    if m.pretrained:
        model = copy.deepcopy(Policy.load(m.pretrained).model)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                                             intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
                                             num_attention_heads=m.num_attention_heads))  # fmt: skip
    sft = cfg.flywheel.sft
    precision = choose(sft.optim.bf16, model, sft.batch_size)
    opt = make_optimizer(model.parameters(), OptimConfig())
    ids = torch.randint(
        0, int(model.config.vocab_size), (sft.batch_size, seq), generator=torch.Generator().manual_seed(1)
    )
    model.train()

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision.bf16):
            loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps, precision.as_dict()


def scaled(cfg: RoundConfig, scale: float) -> RoundConfig:
    """`cfg` with the SFT passes, the SFT step cap and the cold start's SFT steps times `scale`."""
    if scale >= 1:
        return cfg
    f = cfg.flywheel
    sft = replace(f.sft, epochs=f.sft.epochs * scale if f.sft.epochs else None,
                  max_steps=max(1, math.ceil(f.sft.max_steps * scale)), steps=max(1, math.ceil(f.sft.steps * scale)))  # fmt: skip
    cold = replace(f.cold_sft, steps=max(1, math.ceil(f.cold_sft.steps * scale)))
    return replace(cfg, flywheel=replace(f, sft=sft, cold_sft=cold))


def fit(
    cfg: RoundConfig, budget_min: float, rounds: int, step_s: float, precision: dict[str, Any]
) -> tuple[RoundConfig, Fit]:
    """The configuration that fits `budget_min` for `rounds` rounds on a machine whose SFT step takes `step_s`."""
    ratio = step_s / REF_STEP_S
    per_round = (rounds + 1) / (REF_ROUNDS + 1)
    sft_min, other_min = REF_SFT_MINUTES * ratio * per_round, (REF_MINUTES - REF_SFT_MINUTES) * ratio * per_round
    estimate = sft_min + other_min
    scale = 1.0 if estimate <= budget_min else max(MIN_SCALE, (budget_min - other_min) / sft_min)
    scale = min(1.0, scale)
    fitted = other_min + sft_min * scale
    return scaled(cfg, scale), Fit(step_s, precision, budget_min, estimate, scale, fitted)
