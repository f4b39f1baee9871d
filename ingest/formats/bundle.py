"""The think-aloud session bundle: format, manifest dataclass, writer and a scripted-speech helper.

A bundle is a folder, a .zip or a .tar.gz holding (JSON Schema: schemas/bundle.schema.json)::

    manifest.json        BundleManifest (below); "format": "flywheel.think-aloud/1"
    events.jsonl         raw input events, one JSON object a line (see EVENT TYPES)
    audio.<ext>          optional: wav, flac, mp3, ogg or m4a; mono or stereo; any sample rate
    transcript.jsonl     optional: {"t_start", "t_end", "text"} lines, used instead of ASR (text-only bundles)
    screenshots/NNNN.png optional: listed in manifest "screenshots" as {"t": seconds, "file": path}
    screen.<ext>         optional: a screen video (mp4, mkv, webm, ...)

Times: every stream has its own clock; session time = stream time + manifest.clock_offsets[stream]
(streams: events, audio, video, screenshots, transcript). Coordinates in events are screen pixels of a
screen_width x screen_height screen; the pipeline rescales them to screenshot pixels.

EVENT TYPES (field "type"; "t" always; extra fields are kept but ignored):
    mouse_move {x, y}                   dropped by the reducer
    mouse_down / mouse_up {x, y, button: left|right|middle}
    wheel {x, y, dx, dy}                dy > 0 = up, dy < 0 = down, dx > 0 = right
    key_down / key_up {key}             key: a character ("a", "A", "1", " ") or a name
                                        ("enter", "backspace", "tab", "esc", "ctrl", "shift", "alt", "cmd", "f5", ...)

API (what other packages call)::

    write_bundle(out_dir, manifest, events, audio=None, screenshots=None, video=None,
                 transcript=None, archive=None) -> Path
        audio: a path or the file's bytes (suffix from audio_name, default audio.wav)
        screenshots: [(t, png_bytes), ...]; video: a path or bytes; transcript: [(t0, t1, text), ...]
        archive: None (a folder), "zip" or "tar.gz" (the archive next to out_dir, folder removed)
    speak_script(script, wav_path, sample_rate=16000) -> list[(t0, t1, text)] | None
        script [(t, text)]: speaks each text with espeak-ng starting at t (pushed later if the previous
        utterance is still running); returns the actual spans, or None when espeak-ng is missing.
    build_think_aloud_bundle(out_dir, manifest, steps, gap_s=0.6, archive=None, speech=True, voice="en-us",
                             wpm=150, channels=1, aside_voice="en-gb") -> Path
        steps [ScriptedStep(thought, events, screenshot, voice=, wpm=, pause_s=, channel=, aside=)]: speaks
        each thought (a second speaker's aside at the same time, on channel 1), then plays the step's events
        (times relative to the step's action start) after the speech; the screenshot is stamped just before.
        Without espeak-ng (or speech=False) the thoughts go into transcript.jsonl instead of audio.
    click_events / double_click_events / right_click_events / drag_events / type_events /
    hotkey_events / scroll_events: raw-event builders with times relative to 0.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

FORMAT = "flywheel.think-aloud/1"
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
TRANSCRIPT = "transcript.jsonl"
STREAMS = ("events", "audio", "video", "screenshots", "transcript")
EVENT_TYPES = ("mouse_move", "mouse_down", "mouse_up", "wheel", "key_down", "key_up")
AUDIO_EXTS = (".wav", ".flac", ".mp3", ".ogg", ".m4a")
GROUPS = ("expert", "novice")


@dataclass(frozen=True)
class Screenshot:
    t: float
    file: str


@dataclass(frozen=True)
class BundleManifest:
    """What manifest.json holds. Free text (instruction, annotator_id, meta) is untrusted: PII is redacted on ingest."""

    session_id: str
    instruction: str
    screen_width: int
    screen_height: int
    annotator_id: str | None = None
    group: str | None = None  # expert | novice
    task_id: str | None = None
    app: str | None = None
    platform: str | None = None
    clock_offsets: dict[str, float] = field(default_factory=dict)  # stream -> seconds added to its times
    events: str = EVENTS
    audio: str | None = None
    video: str | None = None
    transcript: str | None = None
    screenshots: tuple[Screenshot, ...] = ()
    elements: tuple[str, ...] = ()  # names of on-screen elements (text observation / accessibility): ASR priming
    meta: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT

    def offset(self, stream: str) -> float:
        return float(self.clock_offsets.get(stream, 0.0))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["screenshots"] = [asdict(s) for s in self.screenshots]
        d["elements"] = list(self.elements)
        return {k: v for k, v in d.items() if v is not None and not (k == "elements" and not v)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BundleManifest:
        """Build from a dict already validated against the JSON Schema (see ingest.think_aloud)."""
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["screenshots"] = tuple(Screenshot(float(s["t"]), str(s["file"])) for s in d.get("screenshots") or [])
        kw["clock_offsets"] = {k: float(v) for k, v in (d.get("clock_offsets") or {}).items()}
        kw["elements"] = tuple(str(e) for e in d.get("elements") or ())
        return cls(**kw)


def schema_path() -> Path:
    return Path(__file__).resolve().parents[2] / "schemas" / "bundle.schema.json"


def load_schema() -> dict[str, Any]:
    return json.loads(schema_path().read_text())


# --- raw-event builders (times relative to 0; shift them with `shift`) -------------------------------------


def shift(events: Sequence[dict[str, Any]], dt: float) -> list[dict[str, Any]]:
    return [{**e, "t": round(float(e["t"]) + dt, 4)} for e in events]


def click_events(x: int, y: int, button: str = "left", hold_s: float = 0.08) -> list[dict[str, Any]]:
    return [
        {"t": 0.0, "type": "mouse_move", "x": x, "y": y},
        {"t": 0.02, "type": "mouse_down", "x": x, "y": y, "button": button},
        {"t": 0.02 + hold_s, "type": "mouse_up", "x": x, "y": y, "button": button},
    ]


def right_click_events(x: int, y: int) -> list[dict[str, Any]]:
    return click_events(x, y, "right")


def double_click_events(x: int, y: int) -> list[dict[str, Any]]:
    return click_events(x, y) + shift(click_events(x, y)[1:], 0.12)


def drag_events(x: int, y: int, x2: int, y2: int, n_moves: int = 5) -> list[dict[str, Any]]:
    ev = [{"t": 0.0, "type": "mouse_down", "x": x, "y": y, "button": "left"}]
    for i in range(1, n_moves + 1):
        f = i / n_moves
        ev.append({"t": 0.05 * i, "type": "mouse_move", "x": round(x + (x2 - x) * f), "y": round(y + (y2 - y) * f)})
    ev.append({"t": 0.05 * (n_moves + 1), "type": "mouse_up", "x": x2, "y": y2, "button": "left"})
    return ev


def type_events(text: str, dt: float = 0.06) -> list[dict[str, Any]]:
    """Keystrokes for `text`; "\b" stands for backspace (so typos and corrections can be scripted)."""
    ev: list[dict[str, Any]] = []
    for i, ch in enumerate(text):
        key = "backspace" if ch == "\b" else ("enter" if ch == "\n" else ch)
        ev += [{"t": i * dt, "type": "key_down", "key": key}, {"t": i * dt + dt / 2, "type": "key_up", "key": key}]
    return ev


def hotkey_events(*keys: str) -> list[dict[str, Any]]:
    ev = [{"t": 0.03 * i, "type": "key_down", "key": k} for i, k in enumerate(keys)]
    t = 0.03 * len(keys) + 0.05
    return ev + [{"t": t + 0.02 * i, "type": "key_up", "key": k} for i, k in enumerate(reversed(keys))]


def scroll_events(x: int, y: int, direction: str = "down", ticks: int = 3) -> list[dict[str, Any]]:
    dx, dy = {"up": (0, 1), "down": (0, -1), "left": (-1, 0), "right": (1, 0)}[direction]
    return [{"t": 0.05 * i, "type": "wheel", "x": x, "y": y, "dx": dx, "dy": dy} for i in range(ticks)]


# --- writer ---------------------------------------------------------------------------------------------------


def _put(dst: Path, src: str | Path | bytes) -> None:
    if isinstance(src, (bytes, bytearray)):
        dst.write_bytes(bytes(src))
    else:
        shutil.copyfile(src, dst)


def write_bundle(
    out_dir: str | Path,
    manifest: BundleManifest,
    events: Sequence[dict[str, Any]],
    audio: str | Path | bytes | None = None,
    screenshots: Sequence[tuple[float, bytes]] | None = None,
    video: str | Path | bytes | None = None,
    transcript: Sequence[tuple[float, float, str]] | None = None,
    archive: str | None = None,
    audio_name: str | None = None,
    video_name: str | None = None,
) -> Path:
    """Write a bundle folder (or archive) and return its path. File names in the manifest are filled in here."""
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    m = manifest
    if audio is not None:
        name = audio_name or (Path(audio).name if not isinstance(audio, (bytes, bytearray)) else "audio.wav")
        name = "audio" + Path(name).suffix.lower()
        _put(out / name, audio)
        m = replace(m, audio=name)
    if video is not None:
        name = (
            "screen" + Path(video_name or (str(video) if not isinstance(video, (bytes, bytearray)) else "x.mp4")).suffix
        )
        _put(out / name, video)
        m = replace(m, video=name)
    if screenshots:
        (out / "screenshots").mkdir()
        shots = []
        for i, (t, png) in enumerate(screenshots):
            rel = f"screenshots/{i:04d}.png"
            (out / rel).write_bytes(png)
            shots.append(Screenshot(float(t), rel))
        m = replace(m, screenshots=tuple(shots))
    if transcript:
        (out / TRANSCRIPT).write_text(
            "".join(json.dumps({"t_start": a, "t_end": b, "text": s}) + "\n" for a, b, s in transcript)
        )
        m = replace(m, transcript=TRANSCRIPT)
    (out / m.events).write_text("".join(json.dumps(e) + "\n" for e in events))
    (out / MANIFEST).write_text(json.dumps(m.to_json(), indent=2))
    if archive is None:
        return out
    return pack(out, archive)


def pack(folder: Path, archive: str) -> Path:
    """Turn a bundle folder into folder.zip or folder.tar.gz (members relative to the bundle root)."""
    if archive == "zip":
        dst = folder.with_name(folder.name + ".zip")
        with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(folder.rglob("*")):
                if p.is_file():
                    z.write(p, p.relative_to(folder).as_posix())
    elif archive == "tar.gz":
        dst = folder.with_name(folder.name + ".tar.gz")
        with tarfile.open(dst, "w:gz") as t:
            for p in sorted(folder.rglob("*")):
                if p.is_file():
                    t.add(p, p.relative_to(folder).as_posix())
    else:
        raise ValueError(f"archive must be None, 'zip' or 'tar.gz', got {archive!r}")
    shutil.rmtree(folder)
    return dst


# --- scripted speech --------------------------------------------------------------------------------------------


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def synthesize(text: str, sample_rate: int = 16000, voice: str = "en-us", wpm: int = 150) -> Any:
    """Speak `text` with espeak-ng; return float32 mono samples at sample_rate (numpy)."""
    import soundfile as sf

    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "s.wav"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), text], check=True, capture_output=True
        )
        data, sr = sf.read(raw, dtype="float32", always_2d=True)
    data = data.mean(axis=1)
    if sr != sample_rate:
        from scipy.signal import resample_poly

        g = math.gcd(sr, sample_rate)
        data = resample_poly(data, sample_rate // g, sr // g).astype("float32")
    return data


def speak_script(
    script: Sequence[tuple[float, str]], wav_path: str | Path, sample_rate: int = 16000, tail_s: float = 1.0
) -> list[tuple[float, float, str]] | None:
    """Speak each (t, text) at time t into one WAV; return the actual (t0, t1, text) spans, None without espeak-ng."""
    if not espeak_available():
        return None
    import numpy as np
    import soundfile as sf

    clips, spans, cursor = [], [], 0.0
    for t, text in script:
        clip = synthesize(text, sample_rate)
        t0 = max(float(t), cursor)
        t1 = t0 + len(clip) / sample_rate
        clips.append((t0, clip))
        spans.append((round(t0, 3), round(t1, 3), text))
        cursor = t1 + 0.05
    total = int((cursor + tail_s) * sample_rate)
    buf = np.zeros(total, dtype="float32")
    for t0, clip in clips:
        i = int(t0 * sample_rate)
        buf[i : i + len(clip)] += clip
    sf.write(wav_path, buf, sample_rate, subtype="PCM_16")
    return spans


@dataclass(frozen=True)
class ScriptedStep:
    """One demonstrator step: the thought spoken before the action, the action's raw events (times relative to
    the action start), and optionally the screen just before the action (PNG bytes).

    voice / wpm override the bundle's for this thought (espeak-ng voice names: en-us, en-gb, de, fr, ...);
    pause_s is silence before it; channel puts it on one channel of a two-channel recording (None: both);
    aside is a second speaker's line, said at the same time on channel 1 (mixed in when the bundle is mono)."""

    thought: str
    events: Sequence[dict[str, Any]]
    screenshot: bytes | None = None
    voice: str | None = None
    wpm: int | None = None
    pause_s: float = 0.0
    channel: int | None = None
    aside: str = ""


def build_think_aloud_bundle(
    out_dir: str | Path,
    manifest: BundleManifest,
    steps: Sequence[ScriptedStep],
    gap_s: float = 0.6,
    lead_s: float = 0.5,
    archive: str | None = None,
    speech: bool = True,
    voice: str = "en-us",
    wpm: int = 150,
    channels: int = 1,
    aside_voice: str = "en-gb",
) -> Path:
    """Lay out thought -> action -> thought -> action on one timeline and write the bundle.

    Speech for step i starts after step i-1's events end (+gap, + the step's pause_s); the action starts gap_s
    after the speech ends. With speech (and espeak-ng present) the audio is a WAV (`channels` 1 or 2);
    otherwise the thoughts go to transcript.jsonl with estimated spans (0.4 s per word), so the bundle still
    carries its thoughts.
    """
    use_speech = speech and espeak_available()
    import numpy as np

    sr = 16000
    t = lead_s
    clips: list[tuple[float, int | None, Any]] = []
    spans: list[tuple[float, float, str]] = []
    events: list[dict[str, Any]] = []
    shots: list[tuple[float, bytes]] = []
    for st in steps:
        t += st.pause_s
        dur = 0.0
        for text, ch, v, w in ((st.thought, st.channel, st.voice or voice, st.wpm or wpm),
                               (st.aside, 1, aside_voice, st.wpm or wpm)):  # fmt: skip
            if not text:
                continue
            if use_speech:
                clip = synthesize(text, sr, v, w)
                clips.append((t, ch if channels == 2 else None, clip))
                d = len(clip) / sr
            else:
                d = 0.4 * max(1, len(text.split()))
            spans.append((round(t, 3), round(t + d, 3), text))
            dur = max(dur, d)
        t += dur + gap_s
        if st.screenshot is not None:
            shots.append((round(t - 0.1, 3), st.screenshot))
        ev = shift(st.events, t)
        events += ev
        t = max([t] + [e["t"] for e in ev]) + gap_s
    events.sort(key=lambda e: e["t"])
    audio = None
    if use_speech:
        buf = np.zeros((channels, int((t + 1.0) * sr)), dtype="float32")
        for t0, ch, clip in clips:
            i = int(t0 * sr)
            rows = [ch] if ch is not None else list(range(channels))
            buf[rows, i : i + len(clip)] += clip
        import soundfile as sf

        bio = io.BytesIO()
        sf.write(bio, np.clip(buf.T, -1.0, 1.0), sr, format="WAV", subtype="PCM_16")
        audio = bio.getvalue()
    return write_bundle(
        out_dir,
        manifest,
        events,
        audio=audio,
        screenshots=shots or None,
        transcript=None if use_speech else sorted(spans),
        archive=archive,
        audio_name="audio.wav",
    )
