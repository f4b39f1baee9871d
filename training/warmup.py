"""Copy warm-up: teach a freshly built policy to copy spans from its context before it sees any task.

Why: a GUI policy mostly copies - the name in the instruction into its thought, the centre of the element with that
name from the screen into its action. A small model trained from scratch on a few hundred demonstrations never
forms the circuit that does this (an induction head) in the steps a round can afford; it writes names and
coordinates it memorised instead (docs/training.md). The circuit forms quickly on a dense, synthetic signal:
sequences in which a span of the policy's own text reappears later, with the loss only on the repeat (every token
after the first is predictable only by finding the earlier occurrence and copying what followed it).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

from training.config import WarmupConfig
from training.data import collate
from training.loop import train_lm
from training.model import Policy
from training.prompt import Encoded


def copy_example(corpus: Sequence[int], cfg: WarmupConfig, rng: random.Random) -> Encoded:
    """One sequence: some text, a span, a gap of other text, the span again (agent mask on the repeat's tail)."""
    n = rng.randint(cfg.min_span, cfg.max_span)
    a = rng.randrange(max(1, len(corpus) - n - cfg.max_gap - 1))
    span = list(corpus[a : a + n])
    g0 = a + n + rng.randint(0, cfg.max_gap // 2)
    gap = list(corpus[g0 : g0 + rng.randint(0, cfg.max_gap // 2)])
    b = rng.randrange(max(1, len(corpus) - cfg.max_gap))
    pre = list(corpus[b : b + rng.randint(0, cfg.max_gap // 2)])
    ids = pre + span + gap + span
    return Encoded(ids, [0] * (len(pre) + n + len(gap) + 1) + [1] * (n - 1))


def copy_batches(corpus: Sequence[int], cfg: WarmupConfig, pad_id: int) -> Iterator:
    rng = random.Random(cfg.seed)
    for _ in range(cfg.steps):
        yield collate([copy_example(corpus, cfg, rng) for _ in range(cfg.batch_size)], pad_id)


def copy_warmup(
    policy: Policy, texts: Sequence[str], cfg: WarmupConfig, on_step: Callable[[int, float], None] | None = None
) -> list[float]:
    """Train `policy` in place on copy sequences drawn from `texts` (tokenized once); returns the loss per step."""
    if cfg.steps <= 0:
        return []
    corpus = [i for t in texts for i in policy.tokenizer.encode(t + "\n", add_special_tokens=False)]
    if len(corpus) < cfg.max_span + cfg.max_gap + 2:
        raise ValueError(f"copy warm-up needs more text than {len(corpus)} tokens")
    losses, _ = train_lm(
        policy.model, copy_batches(corpus, cfg, policy.tokenizer.pad_token_id), cfg.steps, cfg.optim, on_step
    )
    return losses
