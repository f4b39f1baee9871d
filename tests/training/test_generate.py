"""The sampler (training/generate.py): its in-place KV cache and the finished rows it drops from the batch must
not change what it writes. Greedy tokens equal transformers' own `generate`; sampled tokens carry the
log-probabilities a full forward pass gives them (PPO's ratios depend on it)."""

from __future__ import annotations

import torch

from training.base import BASE_MODEL
from training.envs import training_tasks
from training.generate import sample
from training.model import Policy
from training.prompt import encode_prompt, render_prompt


def _prompts(policy: Policy, n: int) -> list[list[int]]:
    from schemas.prompt import PromptConfig

    cfg = PromptConfig()
    return [encode_prompt(policy.tokenizer, render_prompt(t.instruction, [], t.make_env().reset(), cfg), cfg)
            for t in training_tasks(n, 7)]  # fmt: skip


def test_greedy_tokens_equal_transformers_generate_on_prompts_of_different_lengths() -> None:
    pol = Policy.load(BASE_MODEL)
    tok = pol.tokenizer
    prompts = _prompts(pol, 24)
    ours = sample(pol.model, tok, prompts, 48, 0.0)
    lens = {len(s.token_ids) for s in ours}
    assert len(lens) > 1 and any(s.finished for s in ours)  # rows finish at different steps: the batch shrinks
    L = max(len(p) for p in prompts)
    ids = torch.tensor([[tok.pad_token_id] * (L - len(p)) + p for p in prompts])
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        att[i, L - len(p) :] = 1
    with torch.no_grad():
        out = pol.model.generate(input_ids=ids, attention_mask=att, max_new_tokens=48, do_sample=False,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    for s, row in zip(ours, out[:, L:].tolist()):
        assert s.token_ids == row[: len(s.token_ids)]


def test_sampled_tokens_carry_their_teacher_forced_log_probabilities() -> None:
    from training.data import next_token_logprobs

    pol = Policy.load(BASE_MODEL)
    prompts = [p for p in _prompts(pol, 16) for _ in range(3)]
    outs = sample(pol.model, pol.tokenizer, prompts, 48, 1.0, torch.Generator().manual_seed(3))
    assert len({len(s.token_ids) for s in outs}) > 1
    with torch.no_grad():
        for p, s in zip(prompts, outs):
            ids = torch.tensor([p + s.token_ids])
            lp = next_token_logprobs(pol.model, ids, torch.ones_like(ids))[0, len(p) - 1 :]
            assert torch.allclose(lp, torch.tensor(s.logprobs), atol=1e-4)


def test_identical_prompts_are_encoded_once_and_answered_as_if_alone() -> None:
    pol = Policy.load(BASE_MODEL)
    uniq = _prompts(pol, 4)
    prompts = [p for p in uniq for _ in range(5)]
    seen: list[int] = []
    forward = pol.model.forward

    def spy(*a, **k):
        seen.append(k["input_ids"].shape[0])
        return forward(*a, **k)

    pol.model.forward = spy
    dup = sample(pol.model, pol.tokenizer, prompts, 40, 0.0)
    pol.model.forward = forward
    assert seen[0] == len(uniq)  # the prompt pass ran once per distinct prompt
    alone = sample(pol.model, pol.tokenizer, uniq, 40, 0.0)
    assert [s.token_ids for s in dup] == [s.token_ids for s in alone for _ in range(5)]
