"""Batched sampling with a KV cache, returning each generated token's log-probability.

A plain loop rather than `model.generate`, so temperature 1.0 means the model's own distribution (no default
top-k or top-p) and the stored log-probabilities are exactly those of the behaviour policy, as PPO needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from training.attention import attention

#: The attention the sampler runs under: SDPA, except for one-token queries (every decoding step after the prompt).
DECODE_ATTENTION = "flywheel_decode"


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """One query token against the cache as two plain matrix products. PyTorch's CPU flash kernel tiles over the
    query length, so with one query it was 70% of a decoding step (18 ms of a 64-row step of the sandbox policy,
    against well under 1 ms for the products); longer queries (the prompt) keep SDPA."""
    if query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)  # type: ignore[arg-type]
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scale  # (B, H, 1, S)
    if attention_mask is not None:  # SDPA's boolean mask: True where a key may be attended to
        scores = scores.masked_fill(~attention_mask[..., : key.shape[-2]], float("-inf"))
    out = torch.matmul(torch.softmax(scores.float(), -1).to(value.dtype), value)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(DECODE_ATTENTION, decode_attention)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)


@dataclass(frozen=True)
class Sample:
    token_ids: list[int]  # generated tokens, up to and including EOS when one was produced
    logprobs: list[float]  # log pi(token | prefix) under the sampling distribution, one per token
    text: str
    finished: bool  # produced EOS within the budget


@torch.no_grad()
def sample(
    model,  # noqa: ANN001
    tokenizer,  # noqa: ANN001
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    batch_size: int = 256,
) -> list[Sample]:
    """Continue every prompt (token ids). temperature 0 is greedy (log-probabilities of the argmax).

    `model` may also be a served model (training.served.ServedModel: anything with `complete`): each batch is then
    one request to its server, seeded from `generator` so a seeded run asks for the same samples again. A
    vision-language model (training/vlm.py: prompts are training.vision.VisionPrompt) samples with its own `sample`."""
    out: list[Sample] = []
    remote = getattr(model, "complete", None)
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        if remote is not None:
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if generator is not None else None
            out += remote(chunk, max_new_tokens, temperature, seed)
        elif getattr(model, "vision", None) is not None:
            out += model.sample(tokenizer, chunk, max_new_tokens, temperature, generator)
        else:
            out += _sample_batch(model, tokenizer, chunk, max_new_tokens, temperature, generator)
    return out


class _InPlaceLayer(DynamicLayer):
    """A layer's keys and values written in place into buffers sized for the whole generation. DynamicLayer grows by
    torch.cat, copying the whole cache at every token: 26% of the sandbox's generation time (measured on 700
    candidates of 250-token prompts)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity, self.n = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        B, H, _, D = key_states.shape
        self.device = key_states.device
        self.kbuf = key_states.new_empty((B, H, self.capacity, D))
        self.vbuf = value_states.new_empty((B, value_states.shape[1], self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        m = key_states.shape[-2]
        self.kbuf[:, :, self.n : self.n + m] = key_states
        self.vbuf[:, :, self.n : self.n + m] = value_states
        self.n += m
        self.keys, self.values = self.kbuf[:, :, : self.n], self.vbuf[:, :, : self.n]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.n

    def keep(self, rows: torch.Tensor) -> None:
        """Only these batch rows from now on (finished rows leave the batch)."""
        self.kbuf, self.vbuf = self.kbuf.index_select(0, rows), self.vbuf.index_select(0, rows)
        self.keys, self.values = self.kbuf[:, :, : self.n], self.vbuf[:, :, : self.n]


#: Finished rows leave the batch once they are this share of it (each later step then costs less).
COMPACT_SHARE = 0.25


def _unique_rows(prompts: Sequence[Sequence[int]]) -> tuple[list[Sequence[int]], torch.Tensor]:
    """The distinct prompts (first-seen order) and, per prompt, the index of its distinct one."""
    first: dict[tuple[int, ...], int] = {}
    inverse = [first.setdefault(tuple(p), len(first)) for p in prompts]
    uniq: list[Sequence[int]] = [()] * len(first)
    for p, u in zip(prompts, inverse):
        uniq[u] = p
    return uniq, torch.tensor(inverse, dtype=torch.long)


def _sample_batch(model, tokenizer, prompts, max_new_tokens, temperature, generator) -> list[Sample]:  # noqa: ANN001
    with attention(model, DECODE_ATTENTION):  # another attention (eager, a VLM's) is left as it is
        return _decode(model, tokenizer, prompts, max_new_tokens, temperature, generator)


def _decode(model, tokenizer, prompts, max_new_tokens, temperature, generator) -> list[Sample]:  # noqa: ANN001
    was_training = model.training
    model.eval()
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    # Identical prompts (G attempts at one task's first step, G candidates at one state) are encoded once and their
    # cache rows copied: the prompt pass is most of a sampled step's work (prompts are ~10x the answers).
    uniq, inverse = _unique_rows(prompts)
    B, L = len(prompts), max(len(p) for p in uniq)
    ids = torch.full((len(uniq), L), pad, dtype=torch.long)
    att = torch.zeros((len(uniq), L), dtype=torch.long)
    for i, p in enumerate(uniq):  # left padding: every row's next token goes at the same column
        ids[i, L - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        att[i, L - len(p) :] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    layers = [_InPlaceLayer(L + max_new_tokens) for _ in range(model.config.num_hidden_layers)]
    res = model(input_ids=ids, attention_mask=att, position_ids=pos, cache=Cache(layers=layers), use_cache=True,
                logits_to_keep=1)  # fmt: skip
    past, logits = res.cache, res.logits[:, -1].float()
    if len(uniq) < B:
        for layer in layers:
            layer.keep(inverse)
        logits, att, pos = logits[inverse], att[inverse], pos[inverse]
    next_pos = pos[:, -1] + 1
    toks = torch.full((B, max_new_tokens), pad, dtype=torch.long)
    lps = torch.zeros((B, max_new_tokens))
    rows = torch.arange(B)  # the original row of each row still in the batch
    done = torch.zeros(B, dtype=torch.bool)
    n = 0
    for t in range(max_new_tokens):
        if temperature > 0:
            logp = F.log_softmax(logits / temperature, dim=-1)
            tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
        else:
            logp = F.log_softmax(logits, dim=-1)
            tok = logp.argmax(-1)
        tok = torch.where(done, torch.full_like(tok, pad), tok)
        toks[rows, t] = tok
        lps[rows, t] = logp.gather(1, tok[:, None]).squeeze(1)
        n = t + 1
        done |= tok == eos
        if bool(done.all()):
            break
        if int(done.sum()) >= COMPACT_SHARE * len(rows):
            live = (~done).nonzero().squeeze(1)
            for layer in layers:
                layer.keep(live)
            rows, tok, att, next_pos, done = rows[live], tok[live], att[live], next_pos[live], done[live]
        att = torch.cat([att, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
        res = model(
            input_ids=tok[:, None], attention_mask=att, position_ids=next_pos[:, None], cache=past, use_cache=True
        )
        past, logits = res.cache, res.logits[:, -1].float()
        next_pos = next_pos + 1
    samples = []
    for i in range(B):
        row = toks[i, :n].tolist()
        k = row.index(eos) + 1 if eos in row else len(row)
        text = tokenizer.decode(row[: k - 1] if eos in row else row, skip_special_tokens=False)
        samples.append(Sample(row[:k], lps[i, :k].tolist(), text, eos in row))
    if was_training:
        model.train()
    return samples
