"""The training forward through `torch.compile` (inductor), for the jobs whose `OptimConfig.compile` asks for it.

Why: at hidden 128 a learner step is mostly norms, activations, rotary embeddings and softmax, not matrix products,
and inductor fuses them. Measured on 2 CPU cores (torch 2.13, bf16 autocast, 16 found examples of 160-480 tokens,
scratch timing): 153 ms a step eager, 101 ms compiled; on one thread 235-271 -> 174-185 ms. The compile is paid
once per process: 50-90 s on 2 cores when nothing is cached, about 10 s from inductor's on-disk cache, which is
kept in the machine's flywheel cache (`kernel_cache`) and filled by `make setup`. A second model of the same
architecture reuses the graphs (its parameters are the graph's inputs), so a round's SFT, RL and the next round's
jobs compile nothing more. Batches of other lengths reuse the dynamic-shape graph, except that batches over 4,096
tokens need a second one (flows.budget.calibrate builds both). Deterministic kernels are used inside the block, so a job run twice
gives the same weights, as it does eagerly.

Only `training.data.trunk_hidden` calls the compiled decoder, and only inside `compiled(...)`: sampling
(`generate`, with its cache) stays eager, and the saved weights are the module's own. A machine where the compile
fails (no C++ compiler, an unsupported model) trains eagerly, with a one-line warning, for the rest of the process;
the `compile` setting (`FLYWHEEL_COMPILE=0`) turns it off for every job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

log = logging.getLogger(__name__)

_ACTIVE: WeakKeyDictionary[Any, Callable[..., Any]] = WeakKeyDictionary()  # decoder -> its compiled wrapper
_failed: str | None = None  # why the compile failed in this process (then nothing is compiled again)


@contextmanager
def compiled(model, enabled: bool = True) -> Iterator[None]:  # noqa: ANN001 - a transformers causal LM
    """Within the block, `trunk_hidden(model, ...)` runs `model`'s decoder compiled (when `enabled`, the model is a
    text model, and no compile has failed in this process)."""
    dec = model.get_decoder() if active(enabled) and hasattr(model, "get_decoder") else None
    if dec is None or dec in _ACTIVE:
        yield
        return
    import torch
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor

    # Kernels read the thread count when they run, not when they were compiled: the search-practice learner
    # switches between one thread (a search worker beside it) and every core.
    inductor.cpp.dynamic_threads = True
    # The decoder's Python floats (dropout's p, the rotary scaling) as constants: traced as symbols, torch's default
    # under dynamic shapes, one is specialised at the end and the whole trace starts again (measured: 64 -> 51 s of
    # a first compile, the trace done once).
    floats = dynamo.specialize_float
    dynamo.specialize_float = True
    # Deterministic kernels: inductor's own backward of the embedding adds into the gradient with atomics from
    # several threads, so two runs of one job differed in the last bits (and round 0's held-out rate by a point)
    # where eager ones are identical. With this flag it calls the deterministic kernel; no slower, measured.
    was = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    _ACTIVE[dec] = torch.compile(dec, dynamic=True)
    try:
        yield
    finally:
        _ACTIVE.pop(dec, None)
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        dynamo.specialize_float = floats


def kernel_cache() -> str:
    """Point inductor's on-disk cache (its compiled kernels and graphs) at the machine's flywheel cache
    (core.settings.machine_cache; a `TORCHINDUCTOR_CACHE_DIR` already set wins) and return it. Why: inductor's
    default is under /tmp, which a reboot empties, and a first compile takes 60-90 s on 2 cores where a cached one
    takes about 10 (`make setup` fills it: `flywheel demo --prepare`). Called when `training` is imported, because
    inductor fixes its folder when torch's compiler is first imported."""
    import os

    from core.settings import machine_cache

    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(machine_cache("inductor")))


def run_decoder(model, **kwargs: Any) -> Any:  # noqa: ANN001
    """`model.get_decoder()(**kwargs)`, compiled inside `compiled(model)`; eager (and never compiled again in this
    process) if the compile fails."""
    global _failed
    dec = model.get_decoder()
    fn = _ACTIVE.get(dec)
    if fn is None:
        return dec(**kwargs)
    try:
        return fn(**kwargs)
    except Exception as e:  # noqa: BLE001 - any compiler failure: train eagerly; a real error recurs below
        _failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        _ACTIVE.clear()
        log.warning("torch.compile failed (%s); training without it in this process", _failed)
        return dec(**kwargs)


def active(enabled: bool) -> bool:
    """Whether a job whose config says `enabled` trains compiled here: the `compile` setting (FLYWHEEL_COMPILE=0
    turns it off for every job) allows it and no compile has failed in this process."""
    from core.settings import get_settings

    return enabled and get_settings().compile and _failed is None


def failure() -> str | None:
    """Why the compile failed in this process (None: it has not)."""
    return _failed
