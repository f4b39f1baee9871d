"""Alignment: each utterance becomes the thought of the action that follows it.

Speech is assigned word by word (by each word's midpoint), so one ASR segment that runs across an action is
split there: words between the previous action and this one (both shifted by `tolerance_s`, because people
finish a sentence while already clicking) belong to this action. Words after the last action are unaligned
speech. Words of segments flagged as hallucinations are never used as thoughts.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from ingest.asr import Transcript, Word


@dataclass(frozen=True)
class AlignedSpeech:
    raw: str  # the words as recognised ("" when none)
    flag: str | None  # "no_speech" | "hallucination" | None
    confidence: float | None  # mean word probability
    speech_s: float


@dataclass(frozen=True)
class AlignMetrics:
    n_actions: int
    thought_share: float
    speech_s: float
    asr_confidence: float | None
    unaligned_speech_s: float
    hallucinated_segments: int


def align(
    action_times: Sequence[float], transcript: Transcript | None, tolerance_s: float = 0.3
) -> tuple[list[AlignedSpeech], AlignMetrics]:
    """Assign transcript words to actions (action_times: sorted session times of each action's start)."""
    n = len(action_times)
    bounds = [t + tolerance_s for t in action_times]  # word belongs to the first action whose bound >= midpoint
    buckets: list[list[Word]] = [[] for _ in range(n)]
    halluc: list[int] = [0] * n
    unaligned = 0.0
    n_hall = 0
    for seg in transcript.segments if transcript else ():
        words = seg.words or (Word(seg.t_start, seg.t_end, seg.text, seg.confidence),)
        if seg.flags:
            n_hall += 1
        for w in words:
            mid = (w.t_start + w.t_end) / 2
            i = bisect.bisect_left(bounds, mid)
            if i >= n:
                if not seg.flags:
                    unaligned += w.t_end - w.t_start
                continue
            if seg.flags:
                halluc[i] += 1
            else:
                buckets[i].append(w)
    out = []
    for i, ws in enumerate(buckets):
        if ws:
            text = " ".join(w.text for w in ws).strip()
            out.append(
                AlignedSpeech(
                    text, None, sum(w.probability for w in ws) / len(ws), sum(w.t_end - w.t_start for w in ws)
                )
            )
        else:
            out.append(AlignedSpeech("", "hallucination" if halluc[i] else "no_speech", None, 0.0))
    with_thought = sum(1 for a in out if a.raw)
    return out, AlignMetrics(
        n_actions=n,
        thought_share=with_thought / n if n else 0.0,
        speech_s=transcript.speech_s if transcript else 0.0,
        asr_confidence=transcript.confidence if transcript else None,
        unaligned_speech_s=round(unaligned, 3),
        hallucinated_segments=n_hall,
    )
