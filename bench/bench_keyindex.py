"""Key-index lookups (storage/keyindex.py) at 1M stored keys: adversarial ids next to random ones.

Adversarial: 32 hex digits that share their first 16 (`f"{seed:08x}{i:024x}"`, as bench_dashboard's lake and any
sequential or time-ordered id), so every key has the same high word; random: content-hash ids. Each lookup is
what an append does: the batch's key strings to words (`key_hashes`) and `contains` over the stored runs (five
runs of 200,000, as five appends leave them), half the queries present. Random and adversarial runs are
interleaved, best of 5 each (the machine is shared).

Figures:
- adversarial lookups vs random ones (target 0.5: within 2x);
- MD5-hashing non-hex keys (`key_hashes`, one DuckDB query) vs hashlib's BLAKE2b one call per key (what it was;
  target 1.0: never slower).
BENCH_QUICK=1: 100,000 keys.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pyarrow as pa

from bench.common import Figure, quick
from storage.keyindex import contains, key_hashes, sort_words

RUN = 200_000


def _ids(n: int, adversarial: bool, start: int = 0) -> pa.Array:
    if adversarial:
        return pa.array([f"{7:08x}{i:024x}" for i in range(start, start + n)], pa.string())
    return pa.array([hashlib.md5(str(i).encode()).hexdigest() for i in range(start, start + n)], pa.string())


def _best_interleaved(fns: dict[str, object], n: int = 5) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(n):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()  # type: ignore[operator]
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def run() -> list[Figure]:
    n = 100_000 if quick() else 1_000_000
    cases = {}
    for adversarial in (False, True):
        stored = _ids(n, adversarial)
        words = key_hashes(stored)
        runs = [sort_words(words[i : i + RUN]) for i in range(0, n, RUN)]
        queries = pa.concat_arrays([stored[: n // 2], _ids(n - n // 2, adversarial, start=n)])
        expect = np.r_[np.ones(n // 2, bool), np.zeros(n - n // 2, bool)]
        got = contains(runs, key_hashes(queries))
        if not (got == expect).all():
            raise RuntimeError(f"contains is wrong on {'adversarial' if adversarial else 'random'} keys")
        cases["adversarial" if adversarial else "random"] = lambda r=runs, q=queries: contains(r, key_hashes(q))
    other = pa.array([f"session/{i}\x1fvalidator" for i in range(n)], pa.string())
    cases["md5"] = lambda: key_hashes(other)
    cases["blake2b"] = lambda: [hashlib.blake2b(k.encode(), digest_size=16).digest() for k in other.to_pylist()]
    best = _best_interleaved(cases)
    return [
        Figure(
            f"key lookups, {n:,} adversarial keys (one shared prefix) vs random keys (keys/s)",
            n / best["adversarial"],
            n / best["random"],
            "keys/s",
            target=0.5,
            note=f"{n:,} queries against {n:,} stored in {-(-n // RUN)} runs: adversarial {best['adversarial']:.3f} s, "
            f"random {best['random']:.3f} s, best of 5 interleaved",
        ),
        Figure(
            "key_hashes of non-hex keys (MD5 in DuckDB) vs BLAKE2b per key in Python (keys/s)",
            n / best["md5"],
            n / best["blake2b"],
            "keys/s",
            target=1.0,
            note=f"{best['md5']:.3f} s vs {best['blake2b']:.3f} s (DuckDB's threads share the cores: ~3.5x when idle)",
        ),
    ]
