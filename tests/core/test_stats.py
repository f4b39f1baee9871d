"""core.stats.wilson: the one Wilson interval, scalar and vectorised alike, (0, 1) for n = 0; nothing else in the
project computes one."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from statsmodels.stats.proportion import proportion_confint

from core.stats import wilson

ROOT = Path(__file__).resolve().parents[2]


@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_scalar_and_vector_agree_with_statsmodels(kn: tuple[int, int]) -> None:
    k, n = kn
    lo, hi = wilson(k, n)
    assert (lo, hi) == pytest.approx(proportion_confint(k, n, alpha=0.05, method="wilson"))
    vlo, vhi = wilson(np.array([k, 0]), np.array([n, 0]))
    assert (vlo[0], vhi[0]) == pytest.approx((lo, hi)) and (vlo[1], vhi[1]) == (0.0, 1.0)
    assert 0.0 <= lo <= k / n + 1e-12 and k / n - 1e-12 <= hi <= 1.0


def test_n_zero_is_the_whole_range() -> None:
    assert wilson(0, 0) == (0.0, 1.0)


def test_one_implementation() -> None:
    """No other module computes a Wilson interval (statsmodels' method='wilson' or a def of its own)."""
    own = ROOT / "core" / "stats.py"
    hits = []
    for p in ROOT.rglob("*.py"):
        if p == own or any(part in (".venv", "tests") for part in p.relative_to(ROOT).parts):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if re.search(r"method\s*=\s*[\"']wilson[\"']|def\s+_?wilson\s*\(", text):
            hits.append(str(p.relative_to(ROOT)))
    assert not hits, hits
