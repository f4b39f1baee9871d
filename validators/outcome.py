"""Outcome validators: did the episode achieve its task? The environment's verdict and reference answers.

The LLM judge / outcome reward model lives in validators/judge.py behind the same interface.
"""

from __future__ import annotations

import json
import re
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rapidfuzz import fuzz, process

from validators.base import EpisodeBatch, Outcome, Validator, as_bool, as_float


class EnvVerdict(Validator):
    """The environment's verifier, carried by a rollout: env_passed, else env_reward >= min_reward."""

    name = "env_verdict"
    kind = "outcome"
    reads = ("env_passed", "env_reward")
    codes = ("env_failed", "no_env_verdict")
    defaults = {"min_reward": 1.0}

    def _check(self, b: EpisodeBatch) -> Outcome:
        passed_col = b.col("env_passed")
        reward = as_float(b.col("env_reward"))
        has_flag = ~as_bool(pc.is_null(passed_col))
        flag = as_bool(passed_col)
        has_reward = ~np.isnan(reward)
        with np.errstate(invalid="ignore"):
            ok = np.where(has_flag, flag, has_reward & (reward >= self.params["min_reward"]))
        none = ~has_flag & ~has_reward
        reason = np.where(none, "no_env_verdict", "env_failed")
        score = np.where(has_reward, reward, ok.astype(float))
        return Outcome(~ok, reason, score=score)


_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def normalize_answer(s: str | None) -> str:
    """Case-, width- and punctuation-insensitive form of an answer: NFKC, casefold, no punctuation, single spaces."""
    if s is None:
        return ""
    s = unicodedata.normalize("NFKC", s).casefold()
    return " ".join(_PUNCT.sub(" ", s).split())


class ReferenceAnswer(Validator):
    """For tasks with a reference answer: the final answer matches it, exactly after normalisation or with a fuzzy
    ratio >= min_ratio (rapidfuzz). Episodes of tasks without a reference pass (nothing to compare).
    """

    name = "reference_answer"
    kind = "outcome"
    reads = ("reference_answer", "final_answer")
    codes = ("answer_mismatch", "no_answer")
    defaults = {"min_ratio": 90.0}

    def _check(self, b: EpisodeBatch) -> Outcome:
        ref, ans = b.col("reference_answer"), b.col("final_answer")
        has_ref = as_bool(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(ref)), 0))
        has_ans = as_bool(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(ans)), 0))
        score = np.full(b.n, np.nan)
        failed = np.zeros(b.n, dtype=bool)
        reason = np.full(b.n, "answer_mismatch", dtype=object)
        no_ans = has_ref & ~has_ans
        failed[no_ans], reason[no_ans], score[no_ans] = True, "no_answer", 0.0
        idx = np.flatnonzero(has_ref & has_ans)
        details = np.full(b.n, None, dtype=object)
        if len(idx):
            take = pa.array(idx)
            refs = [normalize_answer(s) for s in ref.take(take).to_pylist()]
            anss = [normalize_answer(s) for s in ans.take(take).to_pylist()]
            ratio = process.cpdist(refs, anss, scorer=fuzz.ratio, workers=1).astype(float)
            exact = np.array([r == a for r, a in zip(refs, anss)], dtype=bool)
            ratio[exact] = 100.0
            score[idx] = ratio / 100.0
            failed[idx] = ratio < self.params["min_ratio"]
            for i, r, e in zip(idx, ratio, exact):
                details[i] = json.dumps({"match": "exact" if e else "fuzzy", "ratio": round(float(r), 1)})
        return Outcome(failed, reason, score=score, details=pa.array(details, type=pa.string()))
