"""Fixtures for the training tests: a tiny policy (trained tokenizer + small Llama) over the stand-in env."""

from __future__ import annotations

import pytest

from training.config import ModelConfig

TINY = ModelConfig(
    vocab_size=600, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2, max_number=320
)


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory):
    """A fresh tiny policy saved once per session; tests load their own copy (they train it)."""
    from tests.training.fakes import corpus
    from training.model import Policy

    d = tmp_path_factory.mktemp("tiny-policy")
    Policy.create(corpus(), TINY).save(d)
    return d


@pytest.fixture
def tiny_policy(tiny_policy_dir):
    from training.model import Policy

    p = Policy.load(tiny_policy_dir, version="init")
    return p
