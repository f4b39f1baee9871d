"""The copy warm-up: sequences repeat a span of real text with the loss only on the repeat, and training on them
changes the weights and lowers the loss."""

from __future__ import annotations

import random

import torch

from training.config import OptimConfig, WarmupConfig
from training.warmup import copy_example, copy_warmup


def test_a_copy_example_masks_exactly_the_predictable_tail_of_the_repeat() -> None:
    corpus = list(range(1000, 1400))
    cfg = WarmupConfig(min_span=5, max_span=5, max_gap=40)
    for seed in range(50):
        e = copy_example(corpus, cfg, random.Random(seed))
        assert len(e.mask) == len(e.input_ids) and sum(e.mask) == 4
        tail = e.input_ids[-5:]  # the repeat
        first = next(i for i in range(len(e.input_ids) - 5) if e.input_ids[i : i + 5] == tail)
        assert first < len(e.input_ids) - 5  # the span occurs earlier: the masked tokens are copyable
        assert e.mask[-4:] == [1, 1, 1, 1] and not any(e.mask[:-4])


def test_copy_warmup_changes_the_weights_and_lowers_the_loss(tiny_policy) -> None:
    from tests.training.fakes import corpus

    before = torch.cat([p.detach().flatten().clone() for p in tiny_policy.model.parameters()])
    cfg = WarmupConfig(steps=60, batch_size=16, max_gap=30, optim=OptimConfig(lr=3e-3, warmup_steps=5))
    losses = copy_warmup(tiny_policy, corpus(), cfg)
    after = torch.cat([p.detach().flatten() for p in tiny_policy.model.parameters()])
    assert len(losses) == 60 and not torch.equal(before, after)
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10
    assert copy_warmup(tiny_policy, corpus(), WarmupConfig(steps=0)) == []  # off by default


def test_create_policy_warms_up_a_fresh_model_only_when_configured(lake) -> None:
    """The integration: a fresh policy from the piles' text, with and without the warm-up, differ only in weights."""
    from tests.training.conftest import TINY
    from tests.training.test_jobs import _pile
    from training.pipeline import FlywheelConfig, create_policy

    _pile(lake, "sft", 4)
    cold = create_policy(lake, FlywheelConfig(model=TINY))
    seen: list[float] = []
    warm = create_policy(lake, FlywheelConfig(model=TINY, warmup=WarmupConfig(steps=5, batch_size=4, max_gap=20)),
                         on_step=lambda i, loss: seen.append(loss))  # fmt: skip
    assert len(seen) == 5  # the warm-up ran, reporting its steps
    a = torch.cat([p.detach().flatten() for p in cold.model.parameters()])
    b = torch.cat([p.detach().flatten() for p in warm.model.parameters()])
    assert a.shape == b.shape and not torch.equal(a, b)
