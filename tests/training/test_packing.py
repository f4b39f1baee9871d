"""Answers packed after one shared prompt (training/packing.py) get exactly the log-probabilities, values and
gradients they get in rows of their own."""

from __future__ import annotations

import random

import torch

from training.base import BASE_MODEL
from training.model import Policy
from training.rl import StepSeq, _pad, forward_packed, forward_policy, group_order, shared_prompts


def _seqs(policy: Policy) -> list[StepSeq]:
    rng = random.Random(0)
    vocab = len(policy.tokenizer) - 3
    out = []
    for P in (37, 120, 64):
        prompt = [rng.randrange(3, vocab) for _ in range(P)]
        for k in range(3 if P != 64 else 1):  # two groups of three answers, one prompt alone
            a = [rng.randrange(3, vocab) for _ in range(5 + 7 * k)]
            n = len(a)
            out.append(StepSeq(prompt + a, P, torch.zeros(n), torch.ones(n), torch.zeros(n)))
    return out


def test_packed_answers_score_as_if_alone() -> None:
    pol = Policy.load(BASE_MODEL)
    seqs = _seqs(pol)
    rng = random.Random(1)
    seqs = [seqs[i] for i in rng.sample(range(len(seqs)), len(seqs))]  # groups interleaved
    assert shared_prompts(seqs)
    ids, resp = _pad(seqs, pol.tokenizer.pad_token_id)
    lp, v, logits = forward_policy(pol, ids, resp)
    lp2, v2, logits2 = forward_packed(pol, seqs)
    assert lp.shape == lp2.shape == (sum(len(s.adv) for s in seqs),)
    assert torch.allclose(lp, lp2, atol=1e-5) and torch.allclose(v, v2, atol=1e-5)
    g1 = torch.autograd.grad(lp.sum(), list(pol.model.parameters()), allow_unused=True)
    g2 = torch.autograd.grad(lp2.sum(), list(pol.model.parameters()), allow_unused=True)
    for a, b in zip(g1, g2):
        if a is not None:
            assert torch.allclose(a, b, atol=1e-4)


def test_minibatch_order_keeps_a_prompts_answers_together() -> None:
    pol = Policy.load(BASE_MODEL)
    seqs = _seqs(pol)
    order = group_order(seqs, random.Random(3))
    assert sorted(order) == list(range(len(seqs)))
    prompts = [tuple(seqs[i].ids[: seqs[i].n_prompt]) for i in order]
    runs = [p for k, p in enumerate(prompts) if k == 0 or p != prompts[k - 1]]
    assert len(runs) == len(set(prompts))  # each prompt's answers are one contiguous run
