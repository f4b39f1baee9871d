"""Which attention kernel a text policy's forward runs under: one for training forwards, one for sampling.

Measured on 2 CPU cores (AMD EPYC, torch 2.13, bf16 autocast), a learner step of 16 found examples of 125-336
tokens took 123-137 ms under SDPA and 101-102 ms under transformers' eager attention (1 thread: 216 -> 159 ms): the
CPU flash kernel's backward was 37% of the step for sequences this short. Sampling is the other way round (the
280-task held-out evaluation: 18-20 s under SDPA with one-token queries as two products, 23-25 s with products at
every length), so each path keeps its own. Only a model under SDPA is switched: an eager one, or a VLM's own, is
left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

#: Training forwards with a causal or 2-D padding mask (masked_nll, RL's recomputed log-probabilities). Not for a
#: caller's 4-D boolean mask (training/packing.py): eager attention adds its mask, so it stays on SDPA.
TRAIN_ATTENTION = "eager"


@contextmanager
def attention(model, name: str) -> Iterator[None]:  # noqa: ANN001
    """Run the block with `model`'s attention set to `name` (a registered transformers attention), when it is SDPA."""
    was = getattr(model.config, "_attn_implementation", None)
    if was != "sdpa":
        yield
        return
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = was
