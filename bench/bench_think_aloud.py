"""Think-aloud ingestion speed: ASR vs real time, and the rest of a session's ingestion vs the ASR time.

Figures (ratios against a baseline measured in the same run):
- ASR speed: audio seconds per ASR second, against a target of 10x real time (tiny.en, 2 cores; the model is
  loaded once per process and warmed first, as in a batch run). The whole ASR path as ingestion runs it: the
  channel check, priming with the session's instruction and app, per-channel passes, the language gate and
  the voice-activity check for speech ASR gave no words.
- priming's cost: the same ASR path with priming off, interleaved with the primed runs (no target).
- the rest of ingestion: ASR seconds / (reading + event reduction + screenshots + alignment + cleanup + PII
  seconds) on the same session; >= 5x means the rest costs < 20% of the ASR time.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.common import Figure, quick


def run() -> list[Figure]:
    from ingest.asr import AsrConfig, load_audio
    from ingest.channels import transcribe_channels
    from ingest.priming import vocabulary_prompt
    from ingest.think_aloud import IngestOptions, process_input
    from storage.lake import Lake
    from tests.ingest_think_aloud import scripted

    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is needed to synthesise the benchmark session (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bundle = scripted.build(tmp / "bench-session")
        reps = 1 if quick() else 3
        audio = load_audio(next(bundle.glob("audio.*")), split_stereo=True)
        m = scripted.manifest()
        prompt = vocabulary_prompt(m.instruction, m.app, m.elements)
        transcribe_channels(audio[:, : 16000 * 2], AsrConfig(), prompt)  # load and warm the model
        asr_s = plain_s = float("inf")
        for _ in range(reps):  # interleaved, so both see the same load
            asr_s = min(asr_s, transcribe_channels(audio, AsrConfig(), prompt).asr_seconds)
            plain_s = min(plain_s, transcribe_channels(audio, AsrConfig(priming=False)).asr_seconds)
        audio_s = audio.shape[-1] / 16000
        rest = []
        for i in range(reps):
            lk = Lake.open(tmp / f"lake{i}", create=True)
            t0 = time.perf_counter()
            o = process_input(bundle, lk, 0, IngestOptions())  # the whole session: open, read, ..., PII
            rest.append(time.perf_counter() - t0 - o.timings["asr_s"])
        rest_s = min(rest)
    return [
        Figure("ASR speed vs real time (tiny.en, primed, channel check, language gate)", audio_s / asr_s, 1.0,
               "x real time", target=10.0,
               note=f"{audio_s:.1f} s of speech in {asr_s:.2f} s"),
        Figure("ASR speed primed vs unprimed (same session, same run)", audio_s / asr_s, audio_s / plain_s,
               "x real time", note=f"unprimed {plain_s:.2f} s; priming's cost, no target"),
        Figure("ASR time vs the rest of a session's ingestion", asr_s, rest_s, "s", target=5.0,
               note=f"rest (open, read, events, screenshots, align, cleanup, PII) {rest_s * 1000:.0f} ms; target: rest < 20% of ASR"),
    ]  # fmt: skip
