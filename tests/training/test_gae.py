"""GAE, decoupled GAE, length-adaptive lambda and GRPO advantages against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from training.config import RLConfig
from training.rl import decoupled_gae, gae, group_advantages, length_adaptive_lambda


@pytest.mark.parametrize(("length", "expected"), [(40, 0.5), (100, 0.8), (1000, 0.98), (20, 0.0), (5, 0.0), (0, 0.0)])
def test_length_adaptive_lambda(length: int, expected: float) -> None:
    # lambda_policy = 1 - 1/(alpha*l), alpha = 0.05, clamped at 0 for short sequences
    assert length_adaptive_lambda(length, 0.05) == pytest.approx(expected)


def test_gae_by_hand() -> None:
    r = torch.tensor([0.0, 0.0, 1.0])
    v = torch.tensor([0.5, 0.6, 0.7])
    g, lam = 0.9, 0.8
    d2 = 1.0 - 0.7  # terminal: V(s3) = 0
    d1 = 0.0 + g * 0.7 - 0.6
    d0 = 0.0 + g * 0.6 - 0.5
    a2 = d2
    a1 = d1 + g * lam * a2
    a0 = d0 + g * lam * a1
    assert torch.allclose(gae(r, v, g, lam), torch.tensor([a0, a1, a2]))


def test_lambda_one_gives_monte_carlo_returns_and_zero_gives_td() -> None:
    r = torch.tensor([0.0, 0.0, 0.0, 1.0])
    v = torch.tensor([0.2, 0.4, 0.1, 0.3])
    assert torch.allclose(gae(r, v, 1.0, 1.0) + v, torch.ones(4))  # returns = 1 everywhere
    td = gae(r, v, 1.0, 0.0)
    assert torch.allclose(td, torch.tensor([0.4 - 0.2, 0.1 - 0.4, 0.3 - 0.1, 1.0 - 0.3]))


def test_decoupled_gae_uses_two_lambdas() -> None:
    n = 40  # length-adaptive: lambda_policy = 1 - 1/(0.05*40) = 0.5
    r = torch.zeros(n)
    r[-1] = 1.0
    v = torch.linspace(0.1, 0.9, n)
    adv, ret, lam = decoupled_gae(r, v, RLConfig(lambda_critic=1.0, alpha=0.05))
    assert lam == pytest.approx(0.5)
    assert torch.allclose(adv, gae(r, v, 1.0, 0.5))
    assert torch.allclose(ret, torch.ones(n))  # critic: lambda 1 -> Monte Carlo return
    adv2, _, lam2 = decoupled_gae(r, v, RLConfig(length_adaptive=False, lambda_policy=0.95))
    assert lam2 == 0.95 and torch.allclose(adv2, gae(r, v, 1.0, 0.95))


def test_group_advantages() -> None:
    a = group_advantages([1.0, 0.0, 0.0, 0.0, 1.0, 1.0], ["g", "g", "g", "g", "h", "h"])
    assert a[0] == pytest.approx((1 - 0.25) / (0.1875**0.5), rel=1e-4)
    assert a[1] == pytest.approx((0 - 0.25) / (0.1875**0.5), rel=1e-4)
    assert a[4] == pytest.approx(0.0) and a[5] == pytest.approx(0.0)  # no spread, no signal
