"""Think-aloud ingestion speed: ASR vs real time, and the rest of a session's ingestion vs the ASR time.

Figures (ratios against a baseline measured in the same run):
- ASR speed: audio seconds per ASR second, against a target of 10x real time (tiny.en, 2 cores; the model is
  loaded once per process and warmed first, as in a batch run). The whole ASR path as ingestion runs it: the
  channel check, priming with the session's instruction and app, per-channel passes, the language gate and
  the voice-activity check for speech ASR gave no words.
- priming's cost: the same ASR path with priming off, interleaved with the primed runs (no target).
- the rest of ingestion: ASR seconds / (reading + event reduction + screenshots + alignment + cleanup + PII
  seconds) on the same session; >= 5x means the rest costs < 20% of the ASR time.
- torch after ingestion: the share of the cores that SFT steps of the demo's model use in this process after the
  batch (its Whisper model released, ingest.asr.batch_models) against before any ASR ran; a live CTranslate2
  model left torch's parallel regions waiting (160% of 2 cores against 197%, steps 1.2x slower).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from bench.common import Figure, quick


def _torch_share() -> tuple[float, float]:
    """(share of the cores used, seconds per step) over SFT steps of the demo's model (flows.budget.calibrate)."""
    import os
    import resource

    from flows.budget import calibrate
    from flows.config import round_config

    cfg = round_config("sandbox", None, people="scripted")
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    step_s = calibrate(cfg, steps=5 if quick() else 15)[0]
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return cpu / wall / (os.cpu_count() or 1), step_s


def run() -> list[Figure]:
    from ingest.asr import AsrConfig, batch_models, load_audio
    from ingest.channels import transcribe_channels
    from ingest.priming import vocabulary_prompt
    from ingest.think_aloud import IngestOptions, process_input
    from storage.lake import Lake
    from tests.ingest_think_aloud import scripted

    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is needed to synthesise the benchmark session (apt-get install espeak-ng)")
    share0, step0 = _torch_share()  # before any ASR in this process
    with tempfile.TemporaryDirectory() as d, batch_models():
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
    share1, step1 = _torch_share()  # after the batch, its model released
    return [
        Figure("ASR speed vs real time (tiny.en, primed, channel check, language gate)", audio_s / asr_s, 1.0,
               "x real time", target=10.0,
               note=f"{audio_s:.1f} s of speech in {asr_s:.2f} s"),
        Figure("ASR speed primed vs unprimed (same session, same run)", audio_s / asr_s, audio_s / plain_s,
               "x real time", note=f"unprimed {plain_s:.2f} s; priming's cost, no target"),
        Figure("ASR time vs the rest of a session's ingestion", asr_s, rest_s, "s", target=5.0,
               note=f"rest (open, read, events, screenshots, align, cleanup, PII) {rest_s * 1000:.0f} ms; target: rest < 20% of ASR"),
        Figure("torch after an ingestion batch vs before it (same process, share of the cores in SFT steps)",
               100 * share1, 100 * share0, "% of cores", target=0.95,
               note=f"an SFT step {step1:.3f} s after, {step0:.3f} s before (timings, no target)"),
    ]  # fmt: skip
