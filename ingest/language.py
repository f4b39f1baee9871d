"""Language of each utterance: which segments may become thoughts, and which are another language's speech.

Why a gate: the bundled model is English-only, so it hears German as confident-looking English gibberish and
reports "en" whatever was said. A multilingual model (Whisper base) identifies the language, but one call
costs a full 30 s encoder pass, too slow to run on every segment within the 10x-real-time budget. The English
model's own confidence is the gate: segments it decoded with confidence >= `AsrConfig.lid_below` keep its
language (probability None: not asked), the rest are identified. Speech outside `AsrConfig.languages` keeps
its raw text (re-transcribed by `multilingual_model` when one is set) and is flagged "other_language"; other
unsure speech is flagged "low_confidence". Flagged segments never become thoughts.

Speech the English model decoded to nothing (faster-whisper drops a window it judges no-speech with a low log
probability, which is what tiny.en makes of French or German when primed) is still speech: `unheard_speech`
finds voice activity that no recognised word covers and identifies its language the same way, so it is flagged
"other_language" with that language, or "unrecognised_speech" when it is a configured language, never
"no_speech". Silence and noise have no voice activity, so they stay "no_speech".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ingest.asr import (
    HALLUCINATION_FLAGS,
    SAMPLE_RATE,
    SILENCE_DB,
    UNRECOGNISED,
    Segment,
    decode,
    faster_whisper_model,
    resolve_model,
    rms_db,
    shift_segment,
    speech_regions,
)

if TYPE_CHECKING:
    from ingest.asr import AsrConfig


def language_probs(audio: np.ndarray, cfg: AsrConfig) -> list[tuple[str, float]]:
    """Every language's probability for a clip by the multilingual `cfg.lid_model`, most likely first."""
    _, path = resolve_model(cfg.lid_model or "base")
    model = faster_whisper_model(path, cfg.device, cfg.compute_type, cfg.cpu_threads)
    _, _, probs = model.detect_language(audio, language_detection_segments=1)
    return [(str(k), float(v)) for k, v in probs]


def identify(audio: np.ndarray, cfg: AsrConfig) -> tuple[str, float]:
    """(language, probability) of a clip: the identifier's most likely language."""
    return language_probs(audio, cfg)[0]


def identify_unheard(audio: np.ndarray, cfg: AsrConfig) -> tuple[str, float]:
    """(language, probability) of speech the main model gave no words: a configured language only when the
    identifier gives it >= UNHEARD_SURE, else the most likely other language. Why: the English model hearing
    nothing is itself evidence against English; the first French step of the corpus scored en 0.42, fr 0.38."""
    probs = language_probs(audio, cfg)
    if probs[0][0] in cfg.languages and probs[0][1] < UNHEARD_SURE:
        return next(((k, p) for k, p in probs if k not in cfg.languages), probs[0])
    return probs[0]


def _clip(audio: np.ndarray, seg: Segment, pad_s: float = 0.1) -> np.ndarray:
    return audio[max(0, int((seg.t_start - pad_s) * SAMPLE_RATE)) : int((seg.t_end + pad_s) * SAMPLE_RATE)]


def _retranscribe(seg: Segment, audio: np.ndarray, cfg: AsrConfig, lang: str) -> Segment:
    """The segment as the multilingual model hears it in its own language (text and words; flags kept)."""
    start = max(0.0, seg.t_start - 0.1)
    clip = audio[int(start * SAMPLE_RATE) : int((seg.t_end + 0.1) * SAMPLE_RATE)]
    segs, _ = decode(clip, cfg.multilingual_model or "base", replace(cfg, vad=False), lang)
    segs = [shift_segment(s, start) for s in segs if s.text]
    if not segs:
        return seg
    words = tuple(w for s in segs for w in s.words)
    return replace(seg, text=" ".join(s.text for s in segs), words=words)


def identify_segments(
    segments: Sequence[Segment], audio: np.ndarray, cfg: AsrConfig, decoded: str | None
) -> list[Segment]:
    """Each segment with its language, probability and language/confidence flags (see the module docstring)."""
    out = []
    for seg in segments:
        if rms_db(audio, seg.t_start, seg.t_end) < SILENCE_DB:
            out.append(seg)  # nothing was said: no language to ask about
            continue
        lang, prob = decoded or cfg.language, None
        if cfg.lid_model and seg.confidence < cfg.lid_below:
            lang, prob = identify(_clip(audio, seg), cfg)
        flags = list(seg.flags)
        if lang not in cfg.languages:
            flags.append("other_language")  # also on a looping or unsure segment: it is that language's speech
            if cfg.multilingual_model:
                seg = _retranscribe(seg, audio, cfg, lang)
        elif seg.confidence < cfg.low_confidence and not any(f in HALLUCINATION_FLAGS for f in flags):
            flags.append("low_confidence")
        out.append(replace(seg, flags=tuple(flags), language=lang, language_prob=prob))
    return out


#: a word covers the audio this far either side (Whisper's word times are approximate; VAD pads 0.2 s)
COVER_S = 0.3
#: uncovered voice activity shorter than this is not asked about (a breath, a click, a clipped word's tail)
UNHEARD_MIN_S = 0.8
#: the identifier's probability from which unheard speech counts as a configured language (see identify_unheard)
UNHEARD_SURE = 0.5


def uncovered(
    regions: Sequence[tuple[float, float]], segments: Sequence[Segment], cover_s: float = COVER_S
) -> list[tuple[float, float]]:
    """The parts of the voice-activity regions that no segment's words (or wordless segment) come within
    cover_s of, each at least UNHEARD_MIN_S long."""
    spans = sorted(
        (w.t_start - cover_s, w.t_end + cover_s)
        for s in segments
        for w in (s.words or ((s,) if s.t_end > s.t_start else ()))
    )
    out = []
    for a, b in regions:
        t = a
        for c, d in spans:
            if d <= t or c >= b:
                continue
            if c - t >= UNHEARD_MIN_S:
                out.append((t, c))
            t = max(t, d)
        if b - t >= UNHEARD_MIN_S:
            out.append((t, b))
    return out


def unheard_speech(audio: np.ndarray, segments: Sequence[Segment], cfg: AsrConfig, channel: int = 0) -> list[Segment]:
    """A flagged, wordless segment for each stretch of voice activity ASR gave no words: "other_language" with
    the identified language (re-transcribed by `multilingual_model` when set), else "unrecognised_speech"."""
    out = []
    for a, b in uncovered(speech_regions(audio), segments):
        if rms_db(audio, a, b) < SILENCE_DB:
            continue
        seg = Segment(a, b, "", 0.0, 0.0, channel=channel)
        lang, prob = identify_unheard(_clip(audio, seg, 0.0), cfg) if cfg.lid_model else (None, None)
        if lang is not None and lang not in cfg.languages:
            if cfg.multilingual_model:
                seg = _retranscribe(seg, audio, cfg, lang)
            out.append(replace(seg, flags=("other_language",), language=lang, language_prob=prob))
        else:
            out.append(replace(seg, flags=(UNRECOGNISED,), language=lang, language_prob=prob))
    return out


def session_language(segments: Sequence[Segment]) -> tuple[str | None, float | None]:
    """The language with the most speech seconds, and its mean identified probability weighted by duration
    (None when no segment of it was identified: the English-only model was confident throughout)."""
    secs: dict[str, float] = {}
    for s in segments:
        if s.language:
            secs[s.language] = secs.get(s.language, 0.0) + s.t_end - s.t_start
    if not secs:
        return None, None
    lang = max(secs, key=lambda k: secs[k])
    known = [(s.language_prob, s.t_end - s.t_start) for s in segments if s.language == lang and s.language_prob]
    w = sum(d for _, d in known)
    return lang, (round(sum(p * d for p, d in known) / w, 4) if w > 0 else None)
