"""Answers that share a prompt, trained in one row: the prompt once, each answer after it, a tree-shaped mask.

RL's sequences come in groups with one prompt: G candidate actions at one state (step groups), G attempts' first
step (episode groups). A prompt is ~10x its answer, so a batch of G separate rows spends ~90% of its work encoding
the same prompt G times. Packed, a row is `prompt, answer_1, ..., answer_k`: every answer token attends to the
prompt and to its own answer's earlier tokens only, and its positions continue from the prompt's end, so each answer
sees exactly what it would see alone. The first token of every answer is predicted from the prompt's last position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Packed:
    """Rows of packed groups and where each answer token's prediction is read."""

    ids: torch.Tensor  # (B, T)
    positions: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, 1, T, T) boolean: True where a query may attend to a key
    source: torch.Tensor  # (N,) flat index (b * T + t) of the position that predicts each answer token
    target: torch.Tensor  # (N,) the answer tokens, in the order of the sequences given, each answer in order


def pack(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> Packed:
    """(prompt, answer) pairs -> rows of the pairs grouped by identical prompt. The answer tokens (source/target)
    come out in the order of `pairs`, as `torch.cat` of the answers would."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (p, _) in enumerate(pairs):
        groups.setdefault(tuple(p), []).append(i)
    lengths = [len(p) + sum(len(pairs[i][1]) for i in idx) for p, idx in groups.items()]
    B, T = len(groups), max(lengths)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    pos = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, 1, T, T), dtype=torch.bool)
    where: list[tuple[int, int, int]] = [(0, 0, 0)] * len(pairs)  # per pair: row, answer start, predicting start
    for b, (prompt, idx) in enumerate(groups.items()):
        P = len(prompt)
        ids[b, :P] = torch.tensor(prompt, dtype=torch.long)
        pos[b, :P] = torch.arange(P)
        mask[b, 0, :P, :P] = torch.ones(P, P, dtype=torch.bool).tril()
        at = P
        for i in idx:
            a = pairs[i][1]
            L = len(a)
            if L:
                ids[b, at : at + L] = torch.tensor(list(a), dtype=torch.long)
                pos[b, at : at + L] = torch.arange(P, P + L)
                mask[b, 0, at : at + L, :P] = True
                mask[b, 0, at : at + L, at : at + L] = torch.ones(L, L, dtype=torch.bool).tril()
            where[i] = (b, at, P)
            at += L
        pad = torch.arange(at, T)
        mask[b, 0, pad, pad] = True  # padding attends to itself only (a row of no keys would give NaN)
    src: list[torch.Tensor] = []
    tgt: list[torch.Tensor] = []
    for i, (b, at, P) in enumerate(where):
        L = len(pairs[i][1])
        if not L:
            continue
        # the answer's first token is predicted at the prompt's last position, each later one at the token before it
        predict = torch.cat([torch.tensor([P - 1]), torch.arange(at, at + L - 1)])
        src.append(b * T + predict)
        tgt.append(ids[b, at : at + L])
    empty = torch.zeros(0, dtype=torch.long)
    return Packed(ids, pos, mask, torch.cat(src) if src else empty, torch.cat(tgt) if tgt else empty)


def packed_hidden(model, packed: Packed) -> torch.Tensor:  # noqa: ANN001
    """The decoder's last hidden state at every predicting position of `packed`, in its order: (N, hidden)."""
    trunk = model.get_decoder()
    hidden = trunk(input_ids=packed.ids, attention_mask=packed.mask, position_ids=packed.positions,
                   use_cache=False).last_hidden_state  # fmt: skip
    return hidden.reshape(-1, hidden.shape[-1])[packed.source]
