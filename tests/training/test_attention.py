"""Training forwards run under eager attention (faster than SDPA's CPU kernel at these lengths), sampling under
its own, and the model's setting is always restored."""

from __future__ import annotations

import pytest
import torch

from tests.training.fakes import expert_episode
from training.attention import TRAIN_ATTENTION, attention
from training.data import collate, encode_all, episode_examples, masked_nll


def _batch(policy):
    tok = policy.tokenizer
    items = encode_all(tok, [x for s in range(3) for x in episode_examples(expert_episode(s, 2).to_row())])
    return collate(items, tok.pad_token_id)


def test_attention_switches_an_sdpa_model_for_the_block_only_and_restores_it_after_an_error(tiny_policy) -> None:
    cfg = tiny_policy.model.config
    assert cfg._attn_implementation == "sdpa"
    with attention(tiny_policy.model, "eager"):
        assert cfg._attn_implementation == "eager"
    assert cfg._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), attention(tiny_policy.model, "eager"):
        raise RuntimeError("boom")
    assert cfg._attn_implementation == "sdpa"
    cfg._attn_implementation = "eager"  # a model set to another attention is left as it is
    with attention(tiny_policy.model, "flywheel_decode"):
        assert cfg._attn_implementation == "eager"


def test_the_training_loss_runs_under_the_training_attention_with_sdpa_s_loss_and_gradient(
    tiny_policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.data as data

    model, batch = tiny_policy.model, _batch(tiny_policy)
    seen: list[str] = []
    first = model.get_decoder().layers[0].self_attn
    hook = first.register_forward_pre_hook(lambda *_: seen.append(model.config._attn_implementation))

    def loss_and_grad() -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        loss = masked_nll(model, batch)
        loss.backward()
        return loss.detach(), first.q_proj.weight.grad.clone()

    try:
        loss, grad = loss_and_grad()
        monkeypatch.setattr(data, "TRAIN_ATTENTION", "sdpa")  # the reference: SDPA throughout
        ref_loss, ref_grad = loss_and_grad()
    finally:
        hook.remove()
    assert seen == [TRAIN_ATTENTION, "sdpa"] and TRAIN_ATTENTION != "sdpa"
    assert model.config._attn_implementation == "sdpa"  # restored for sampling
    assert torch.allclose(loss, ref_loss, atol=1e-5)
    assert torch.allclose(grad, ref_grad, atol=1e-5, rtol=1e-4) and grad.abs().sum() > 0
