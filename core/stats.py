"""The one binomial interval of the project: the 95% Wilson score interval (statsmodels), used by routing's pass
rates, held-out evaluation, the dashboards and audits alike.

Convention for n = 0: the interval is (0, 1), every rate being possible; it is finite, so it stores and serialises
everywhere. The rate k/n itself is undefined there, and callers that show a rate show none (and so no interval) for
n = 0: the rounds table's pass_rate_lo/hi stay null, a dashboard point has no band, an audit cell is empty."""

from __future__ import annotations

from typing import Any, overload

import numpy as np


@overload
def wilson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]: ...
@overload
def wilson(k: np.ndarray, n: np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]: ...
def wilson(k: Any, n: Any, alpha: float = 0.05) -> tuple[Any, Any]:
    """(lo, hi) of the (1 - alpha) Wilson score interval of k successes in n trials; scalars or arrays (elementwise).
    n = 0 gives (0, 1)."""
    from statsmodels.stats.proportion import proportion_confint

    if np.ndim(k) == 0 and np.ndim(n) == 0:
        if n == 0:
            return 0.0, 1.0
        lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
        return float(lo), float(hi)
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    empty = n == 0
    lo, hi = proportion_confint(k, np.where(empty, 1, n), alpha=alpha, method="wilson")
    return np.where(empty, 0.0, lo), np.where(empty, 1.0, hi)


def paired_test(a: Any, b: Any) -> dict[str, float]:
    """Exact McNemar test of two arms' pass/fail on the same tasks (a[i], b[i]: task i's outcomes): the two-sided
    p-value and the discordant counts (b_only: b passed where a failed)."""
    from statsmodels.stats.contingency_tables import mcnemar

    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes differ in length: {a.shape} vs {b.shape}")
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    table = [[int((a & b).sum()), a_only], [b_only, int((~a & ~b).sum())]]
    p = 1.0 if a_only + b_only == 0 else float(mcnemar(table, exact=True).pvalue)
    return {"p": p, "a_only": float(a_only), "b_only": float(b_only), "n": float(len(a))}
