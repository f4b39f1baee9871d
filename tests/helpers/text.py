"""Word error rate for the think-aloud tests: word-level Levenshtein distance over the reference's words."""

from __future__ import annotations

import re

from rapidfuzz.distance import Levenshtein


def words(s: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", s.lower())


def wer(ref: str, hyp: str) -> float:
    r = words(ref)
    return Levenshtein.distance(r, words(hyp)) / max(1, len(r))
