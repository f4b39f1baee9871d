"""A think-aloud recording made in the browser -> a `flywheel.think-aloud/1` bundle in the landing area.

The page records the microphone (MediaRecorder: WebM/Opus in Chromium) and every pointer and key event with its
time on one clock (seconds since the recorder started); the server ran each action on its environment and kept
the screen before it. The bundle is written with the format's own writer (ingest/formats/bundle.py): the raw
events, the audio decoded and written as 16 kHz WAV (the bundle format names wav/flac/mp3/ogg/m4a; decoding here
also refuses a broken recording before anything lands), and the screenshot before each action, stamped just after
the previous action was sent (so ingestion picks the screen the person saw). It then passes the same checks as
`flywheel upload` and is uploaded to the landing area; the round's intake runs ASR, cleanup, PII redaction and
alignment on it like on any other bundle.
"""

from __future__ import annotations

import io
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from flywheel.people.upload import Landing, Problem, check_bundle
from flywheel.workbench.live import LiveSession
from ingest.archives import Limits

MAX_EVENTS = 200_000
_FIELDS = {"mouse_down": ("x", "y", "button"), "mouse_up": ("x", "y", "button"), "mouse_move": ("x", "y"),
           "wheel": ("x", "y", "dx", "dy"), "key_down": ("key",), "key_up": ("key",)}  # fmt: skip


class RecordingError(ValueError):
    """A recording that cannot become a bundle; `problems` are the upload checks' findings when there are any."""

    def __init__(self, message: str, problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


def upload_limits(max_bytes: int) -> Limits:
    """The bundle limits of the settings (those of `flywheel upload` and ingestion), with the unpacked size capped
    at the workbench's upload limit."""
    base = Limits.from_settings()
    return replace(base, max_bundle_bytes=min(base.max_bundle_bytes, max_bytes))


def clean_events(raw: Any) -> list[dict[str, Any]]:
    """The page's events, keeping only the bundle format's fields (the upload checks validate the values)."""
    if not isinstance(raw, list):
        raise RecordingError("events must be a list")
    if len(raw) > MAX_EVENTS:
        raise RecordingError(f"{len(raw):,} events, over the limit of {MAX_EVENTS:,}")
    out = []
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or e.get("type") not in _FIELDS:
            raise RecordingError(f"event {i} is not one of {', '.join(_FIELDS)}")
        out.append({"t": e.get("t"), "type": e["type"], **{k: e.get(k) for k in _FIELDS[e["type"]] if k in e}})
    return out


def wav_of(audio: bytes) -> bytes:
    """The recorded audio (any container PyAV decodes) as 16 kHz mono 16-bit WAV."""
    import soundfile as sf

    from ingest.asr import SAMPLE_RATE, AudioError, load_audio

    try:
        samples = load_audio(audio)
    except AudioError as e:
        raise RecordingError(f"the recording does not decode: {e}") from None
    buf = io.BytesIO()
    sf.write(buf, samples, SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def land_recording(
    s: LiveSession, events: list[dict[str, Any]], audio: bytes, landing: Landing, group: str | None, limit: int
) -> dict[str, Any]:
    """Build, check and upload the session's bundle; returns what the upload record says."""
    from ingest.formats.bundle import BundleManifest, write_bundle
    from sandbox.export import APP, PLATFORM

    if not s.steps:
        raise RecordingError("nothing was done on the screen: act at least once while recording")
    t = s.task
    shots = [(0.0, s.steps[0].screenshot)]
    for prev, st in zip(s.steps, s.steps[1:]):
        shots.append((round((prev.t_client or 0.0) + 0.001, 3), st.screenshot))
    m = BundleManifest(session_id=s.session_id, instruction=t.instruction, screen_width=t.width,
                       screen_height=t.height, annotator_id=s.owner, group=group, task_id=t.task_id, app=APP,
                       platform=PLATFORM, meta={"tool": "flywheel-workbench", "actions_run": [x.action for x in s.steps]})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="flywheel-workbench-rec-") as tmp:
        path = write_bundle(Path(tmp) / s.session_id, m, events, audio=wav_of(audio), screenshots=shots,
                            archive="zip", audio_name="audio.wav")  # fmt: skip
        check = check_bundle(path, upload_limits(limit))
        if not check.ok:
            raise RecordingError("the recording did not pass the upload checks", check.problems)
        uri, uploaded = landing.upload(check, lambda _n: None)
    return {"session_id": s.session_id, "landed_uri": uri, "uploaded": uploaded, "n_actions": check.n_actions,
            "duration_s": check.duration_s, "audio_s": check.audio_s}  # fmt: skip
