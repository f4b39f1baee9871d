"""Human review: where a session carries two reviews (Episode.meta["reviews"]), both annotators must accept.

A review is {"annotator": ..., "verdict": "good" | "bad"} (or "passed": true/false). Episodes with fewer than two
reviews pass unless `require_two` is set: review is a second opinion where one exists, not a gate on all data.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from validators.base import EpisodeBatch, Outcome, Validator, as_bool

_GOOD = {"good", "pass", "passed", "accept", "accepted", "ok", "yes"}


def review_passed(r: dict[str, Any]) -> bool:
    if "passed" in r:
        return bool(r["passed"])
    return str(r.get("verdict", "")).strip().lower() in _GOOD


class HumanReview(Validator):
    name = "human_review"
    kind = "review"
    reads = ("meta",)
    codes = ("review_disagreement", "review_rejected", "review_missing")
    defaults = {"require_two": False}

    def _check(self, b: EpisodeBatch) -> Outcome:
        meta = b.col("meta")
        maybe = np.flatnonzero(as_bool(pc.match_substring(meta, '"reviews"')))
        failed = np.zeros(b.n, dtype=bool)
        reason = np.full(b.n, "review_missing", dtype=object)
        score = np.full(b.n, np.nan)
        details = np.full(b.n, None, dtype=object)
        n_reviews = np.zeros(b.n, dtype=np.int64)
        for i, raw in zip(maybe, meta.take(pa.array(maybe, type=pa.int64())).to_pylist()):
            try:
                reviews = [r for r in json.loads(raw).get("reviews") or [] if isinstance(r, dict)]
            except (json.JSONDecodeError, AttributeError):
                reviews = []
            n_reviews[i] = len(reviews)
            if len(reviews) < 2:
                continue
            votes = [review_passed(r) for r in reviews[:2]]
            score[i] = sum(votes) / 2
            details[i] = json.dumps({"annotators": [r.get("annotator") for r in reviews[:2]], "votes": votes})
            if votes[0] != votes[1]:
                failed[i], reason[i] = True, "review_disagreement"
            elif not votes[0]:
                failed[i], reason[i] = True, "review_rejected"
        if self.params["require_two"]:
            failed |= n_reviews < 2
        return Outcome(failed, reason, score=score, details=pa.array(details, type=pa.string()))
