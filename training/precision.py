"""Which precision a training step runs in, chosen by measuring this machine rather than assumed.

bfloat16 autocast is about 2x faster on CPUs with AVX512-BF16 or AMX and slower elsewhere (one 2-core machine here
measured 11,711 tokens/s with it against 14,512 without). `OptimConfig.bf16 = "auto"` times a few forward and
backward passes of the model being trained in both precisions, on a batch of the shape training uses, and picks
bf16 only when it is at least `MARGIN` faster. The choice is cached per machine (CPU model, core count, torch
version, model size and batch shape) in `~/.cache/flywheel/precision.json`, so it costs a few seconds once. On an
overloaded machine (load above its cores) with nothing cached, nothing is measured: fp32 is used for this process
(source "busy"). A timing taken under load is noise, and a choice drawn from noise made two runs of one round train
in different precisions (a resumed round then differed from an uninterrupted one in CI).
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from training.attention import TRAIN_ATTENTION, attention

#: bf16 must be this much faster (time ratio) to be chosen: within noise, fp32 is the safer numerics.
MARGIN = 0.95
_LOCK = threading.Lock()
_MEMO: dict[str, Choice] = {}


@dataclass(frozen=True)
class Choice:
    bf16: bool
    fp32_tok_s: float | None = None  # measured throughputs (None when the setting was not "auto")
    bf16_tok_s: float | None = None
    source: str = "config"  # config | measured | cache | busy

    @property
    def name(self) -> str:
        return "bf16" if self.bf16 else "fp32"

    def as_dict(self) -> dict:
        return {"precision": self.name, **asdict(self)}


def cache_path() -> Path:
    from core.settings import machine_cache

    return machine_cache("precision.json")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(model: torch.nn.Module, batch: int, seq: int) -> str:
    n = sum(p.numel() for p in model.parameters())
    return f"{_cpu_name()}|{os.cpu_count()}cpu|{torch.get_num_threads()}thr|torch{torch.__version__}|{TRAIN_ATTENTION}|{n}p|{batch}x{seq}"


def _time_steps(model: torch.nn.Module, ids: torch.Tensor, bf16: bool, steps: int) -> float:
    """Seconds for `steps` forward+backward passes (gradients are dropped: no weight changes)."""
    dev = ids.device.type
    t0 = time.perf_counter()
    for _ in range(steps):
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16), attention(model, TRAIN_ATTENTION):
            out = model(input_ids=ids)
            loss = out.logits.float().mean()
        loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def measure(model: torch.nn.Module, batch: int = 16, seq: int = 128, steps: int = 3, device: str = "cpu") -> Choice:
    """Time both precisions on a random batch of this shape, interleaved (the machine's load changes under both
    alike), best of two rounds each."""
    vocab = int(getattr(model.config, "vocab_size", 1000))
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0)).to(device)
    was_training = model.training
    model.train()
    try:
        _time_steps(model, ids, False, 1)  # warm-up: kernels, allocator
        _time_steps(model, ids, True, 1)
        fp32 = min(_time_steps(model, ids, False, steps) for _ in range(2))
        bf16 = min(_time_steps(model, ids, True, steps) for _ in range(2))
    finally:
        model.train(was_training)
    tokens = batch * seq * steps
    return Choice(bf16 < MARGIN * fp32, tokens / fp32, tokens / bf16, "measured")


def _quiet_machine() -> bool:
    """Whether the last minute's load leaves this process the cores it measured with (only then is it cached)."""
    try:
        return os.getloadavg()[0] <= (os.cpu_count() or 1)
    except OSError:
        return False


def choose(setting: bool | str, model: torch.nn.Module, batch: int = 16, seq: int = 128, device: str = "cpu") -> Choice:
    """The precision for `setting` (True, False, or "auto": measured once per machine and model shape, cached)."""
    if setting != "auto":
        return Choice(bool(setting))
    key = machine_key(model, batch, seq)
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
        path = cache_path()
        try:
            cached = json.loads(path.read_text()).get(key)
        except (OSError, ValueError):
            cached = None
        quiet = _quiet_machine()
        if cached:
            got = Choice(bool(cached["bf16"]), cached.get("fp32_tok_s"), cached.get("bf16_tok_s"), "cache")
        elif not quiet:  # a busy machine's timing is noise: the safe numerics, unmeasured and uncached
            got = Choice(False, source="busy")
        else:
            got = measure(model, batch, seq, device=device)
        if not cached and quiet:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    data = json.loads(path.read_text())
                except (OSError, ValueError):
                    data = {}
                data[key] = asdict(got)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1))
                tmp.replace(path)
            except OSError:  # a read-only home: measure again next time
                pass
        _MEMO[key] = got
        return got
