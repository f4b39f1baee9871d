"""`flywheel simulate`: what a lenient validator does to the piles, with the truth known.

Each round makes `attempts` synthetic rollouts with a true pass share; the environment's verifier passes a true
failure with probability `leniency`. The episodes are landed and routed by the real routing code (route_round with
the real policy), and since every episode carries its truth, the share of true failures that reached SFT is exact.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from storage.lake import Lake
from storage.piles import read_pile
from validators.routing import route_round
from validators.synthetic import screenshot_pool, synthetic_rollouts

_FALSE = '"truth": false'


@dataclass(frozen=True)
class SimRound:
    round: int
    attempts: int
    true_pass_share: float
    n_pass: int
    n_fail: int
    pass_rate: float | None
    pass_rate_lo: float | None
    pass_rate_hi: float | None
    sft_size: int
    ct_size: int
    true_failures: int
    failures_in_sft: int
    failures_to_sft_share: float | None  # of this round's true failures, the share that reached SFT
    sft_bad_share: float | None  # of the whole SFT pile, the share that is truly bad


def _false_count(lake: Lake, pile: str, round: int | None = None) -> int:
    flt = None if round is None else pc.field("round_routed") == round
    meta = read_pile(lake, pile, ["meta"], filter=flt).column("meta")
    return int(pc.sum(pc.match_substring(meta, _FALSE)).as_py() or 0)


#: The default true pass share per round over a four-round run: a policy that improves and then levels off.
DEFAULT_CURVE = (0.30, 0.45, 0.60, 0.70)


def default_pass_shares(rounds: int) -> list[float]:
    """The default curve stretched over `rounds` rounds (linear between its points; four rounds: the curve itself),
    so any --rounds works without --pass-shares."""
    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    at = np.linspace(0, len(DEFAULT_CURVE) - 1, rounds) if rounds > 1 else np.zeros(1)
    return [round(float(x), 4) for x in np.interp(at, np.arange(len(DEFAULT_CURVE)), DEFAULT_CURVE)]


def simulate(
    rounds: int = 4,
    attempts: int = 10_000,
    pass_shares: list[float] | None = None,
    leniency: float = 0.0,
    *,
    lake: Lake | None = None,
    steps: int = 5,
    seed: int = 0,
) -> list[SimRound]:
    """Run the simulation (into `lake`, or a temporary one) and return one row per round."""
    shares = pass_shares or default_pass_shares(rounds)
    if len(shares) != rounds:
        raise ValueError(f"--pass-shares has {len(shares)} value(s) for {rounds} round(s)")
    if any(not 0 <= p <= 1 for p in shares) or not 0 <= leniency <= 1:
        raise ValueError("pass shares and leniency are shares between 0 and 1")
    tmp = None
    if lake is None:
        tmp = tempfile.TemporaryDirectory(prefix="flywheel-sim-")
        lake = Lake.open(Path(tmp.name) / "lake", create=True)
    try:
        pool = screenshot_pool(lake)
        out = []
        for r, p in enumerate(shares, start=1):
            table = synthetic_rollouts(
                attempts, r, screenshots=pool, steps=steps, seed=seed, true_pass_share=p, leniency=leniency
            )
            lake.append("episodes", table)
            s = route_round(lake, r)
            true_fail = int(pc.sum(pc.match_substring(table.column("meta"), _FALSE)).as_py() or 0)
            bad_in_sft = _false_count(lake, "sft", r)
            out.append(
                SimRound(
                    round=r,
                    attempts=attempts,
                    true_pass_share=p,
                    n_pass=s.n_pass,
                    n_fail=s.n_fail,
                    pass_rate=s.pass_rate,
                    pass_rate_lo=s.pass_rate_lo,
                    pass_rate_hi=s.pass_rate_hi,
                    sft_size=s.sft_size,
                    ct_size=s.ct_size,
                    true_failures=true_fail,
                    failures_in_sft=bad_in_sft,
                    failures_to_sft_share=bad_in_sft / true_fail if true_fail else None,
                    sft_bad_share=_false_count(lake, "sft") / s.sft_size if s.sft_size else None,
                )
            )
        return out
    finally:
        if tmp is not None:
            tmp.cleanup()


def as_rows(result: list[SimRound]) -> list[dict[str, Any]]:
    return [asdict(r) for r in result]
