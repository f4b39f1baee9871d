"""Alignment: each utterance becomes the thought of the action that follows it.

Speech is assigned word by word (by each word's midpoint), so one ASR segment that runs across an action is
split there: words between the previous action and this one (both shifted by `tolerance_s`, because people
finish a sentence while already clicking) belong to this action. Words after the last action are unaligned
speech. Within a step, words are joined utterance by utterance in order of the utterances' starts, so two
speakers talking at once (two channels) are not interleaved word by word. Words of flagged segments
(another language, speech ASR gave no words, hallucinations, low confidence) are never used as thoughts; a
step left without trusted words says which flag took them (else "no_speech": nothing was heard).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from ingest.asr import HALLUCINATION_FLAGS, UNRECOGNISED, Transcript, Word, join_words

#: why a step's words were not used, most telling first: real speech (another language, or speech ASR gave no
#: words) before what ASR may have invented or was unsure of
UNTRUSTED = ("other_language", UNRECOGNISED, "hallucination", "low_confidence")


@dataclass(frozen=True)
class AlignedSpeech:
    raw: str  # the words as recognised ("" when none)
    flag: str | None  # "no_speech" | "other_language" | "unrecognised_speech" | "hallucination" | "low_confidence"
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
    other_language_segments: int = 0
    low_confidence_segments: int = 0
    unrecognised_segments: int = 0


def align(
    action_times: Sequence[float], transcript: Transcript | None, tolerance_s: float = 0.3
) -> tuple[list[AlignedSpeech], AlignMetrics]:
    """Assign transcript words to actions (action_times: sorted session times of each action's start)."""
    n = len(action_times)
    bounds = [t + tolerance_s for t in action_times]  # word belongs to the first action whose bound >= midpoint
    buckets: list[list[tuple[float, int, Word]]] = [[] for _ in range(n)]  # (utterance start, channel, word)
    dropped: list[set[str]] = [set() for _ in range(n)]  # why words of this step were not used
    unaligned = 0.0
    counts = dict.fromkeys(UNTRUSTED, 0)
    for seg in transcript.segments if transcript else ():
        words = seg.words or (Word(seg.t_start, seg.t_end, " " + seg.text, seg.confidence),)
        why = _why_untrusted(seg.flags)
        if why:
            counts[why] += 1
        for w in words:
            mid = (w.t_start + w.t_end) / 2
            i = bisect.bisect_left(bounds, mid)
            if i >= n:
                if not why:
                    unaligned += w.t_end - w.t_start
                continue
            if why:
                dropped[i].add(why)
            else:
                buckets[i].append((seg.t_start, seg.channel, w))
    out = []
    for i, bucket in enumerate(buckets):
        ws = [w for *_, w in sorted(bucket, key=lambda b: (b[0], b[1], b[2].t_start))]  # whole utterances, by start
        if ws:
            out.append(
                AlignedSpeech(
                    join_words(ws), None, sum(w.probability for w in ws) / len(ws), sum(w.t_end - w.t_start for w in ws)
                )
            )
        else:
            flag = next((f for f in UNTRUSTED if f in dropped[i]), None)
            out.append(AlignedSpeech("", flag or "no_speech", None, 0.0))
    with_thought = sum(1 for a in out if a.raw)
    return out, AlignMetrics(
        n_actions=n,
        thought_share=with_thought / n if n else 0.0,
        speech_s=transcript.speech_s if transcript else 0.0,
        asr_confidence=transcript.confidence if transcript else None,
        unaligned_speech_s=round(unaligned, 3),
        hallucinated_segments=counts["hallucination"],
        other_language_segments=counts["other_language"],
        low_confidence_segments=counts["low_confidence"],
        unrecognised_segments=counts[UNRECOGNISED],
    )


def _why_untrusted(flags: tuple[str, ...]) -> str | None:
    """The one reason a flagged segment is not a thought (the first of UNTRUSTED that applies)."""
    named = {"hallucination" if f in HALLUCINATION_FLAGS else f for f in flags}
    return next((f for f in UNTRUSTED if f in named), None)
