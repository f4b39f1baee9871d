"""Tokenizing the prompt and the answer (their text format is `schemas.prompt`): `encode_example` tokenizes the two
separately and concatenates them, so the boundary between observation tokens and agent tokens is exact and the
loss mask (1 = agent token) is right by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.prompt import (  # re-exported: the trainer's modules take the text format from here too
    SCREEN_LINE,
    PromptConfig,
    Turn,
    answer_line,
    clip_thought,
    consistent,
    parse_answer,
    render_answer,
    render_prompt,
    target_thought,
    typed_span,
)

__all__ = [
    "PromptConfig",
    "Turn",
    "SCREEN_LINE",
    "clip_thought",
    "consistent",
    "render_prompt",
    "target_thought",
    "typed_span",
    "answer_line",
    "render_answer",
    "parse_answer",
    "Encoded",
    "encode_prompt",
    "encode_example",
    "encode_examples",
]


@dataclass(frozen=True)
class Encoded:
    """Token ids of prompt + answer (+ EOS) and the agent mask: 1 where the token is the agent's, 0 otherwise."""

    input_ids: list[int]
    mask: list[int]

    @property
    def n_agent(self) -> int:
        return sum(self.mask)


def encode_prompt(tokenizer, prompt: str, cfg: PromptConfig = PromptConfig()) -> list[int]:  # noqa: ANN001
    """Prompt ids, left-truncated to `max_prompt_tokens` keeping the instruction line (the task must stay visible)."""
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    if len(ids) <= cfg.max_prompt_tokens:
        return ids
    head, _, rest = prompt.partition("\n")
    head_ids = tokenizer.encode(head + "\n", add_special_tokens=False)
    rest_ids = tokenizer.encode(rest, add_special_tokens=False)
    keep = max(cfg.max_prompt_tokens - len(head_ids), 1)
    return (head_ids + rest_ids[-keep:])[-cfg.max_prompt_tokens :]


def encode_example(tokenizer, prompt: str, answer: str, cfg: PromptConfig = PromptConfig()) -> Encoded:  # noqa: ANN001
    return encode_examples(tokenizer, [(prompt, answer)], cfg)[0]


def encode_examples(
    tokenizer,  # noqa: ANN001
    examples: Sequence[tuple[str, str]],
    cfg: PromptConfig = PromptConfig(),
) -> list[Encoded]:
    """`encode_example` over many examples, tokenized in one batch call (the fast tokenizer runs it in parallel);
    only prompts over the budget are re-encoded one by one for their truncation."""
    if not examples:
        return []
    prompts = tokenizer([p for p, _ in examples], add_special_tokens=False)["input_ids"]
    answers = tokenizer([a for _, a in examples], add_special_tokens=False)["input_ids"]
    out = []
    for (prompt, _), p, a in zip(examples, prompts, answers):
        if len(p) > cfg.max_prompt_tokens:
            p = encode_prompt(tokenizer, prompt, cfg)
        a = a + [tokenizer.eos_token_id]
        out.append(Encoded(p + a, [0] * len(p) + [1] * len(a)))
    return out
