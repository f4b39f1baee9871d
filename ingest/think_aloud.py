"""Think-aloud ingestion: bundles and AgentNet Tool folders -> (thought, action, screenshot) episodes in the lake.

Pipeline per session (plain functions; flows/ingest_think_aloud.py only orchestrates them):
open (safe archive extraction) -> read (manifest schema, events) -> reduce events to actions -> screenshots
(bundle images or video frames, stored content-addressed) -> ASR -> alignment -> cleanup -> PII redaction ->
an Episode and a sessions row. Every failure becomes a Quarantined record with its own error_type; the other
sessions of the run still land. Episode ids are content hashes and sessions are keyed by session_id, so
re-running adds nothing; a session id seen before with different content is quarantined.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import math
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from core import PIPELINE_VERSION
from core.errors import InputError
from ingest import align as align_mod
from ingest import cleanup as cleanup_mod
from ingest import safejson
from ingest.archives import (  # re-exported: callers name them as think_aloud's
    Limits,
    check_member,
    discover,
    folder_sha256,
    kind_of,
    open_input,
)
from ingest.asr import UNRECOGNISED, AsrConfig, AudioError, Transcript, batch_models, load_audio
from ingest.channels import transcribe_channels
from ingest.events import TimedAction, parse_jsonl, reduce_events, to_table, validate
from ingest.formats.bundle import MANIFEST, BundleManifest, load_schema
from ingest.land import LandResult, Quarantined, land
from ingest.language import session_language
from ingest.pii import pseudonym, redact, redact_obj
from ingest.priming import vocabulary_prompt
from ingest.session import IngestError, SessionData
from ingest.video import frames_before, probe
from schemas.actions import Action, ActionError, format_action
from schemas.records import Episode, Step
from storage.errors import LakeError
from storage.lake import Lake

SOURCE = "think_aloud"
_round = builtins.round  # the public functions take a `round` (flywheel round) argument


@dataclass(frozen=True)
class IngestOptions:
    asr: AsrConfig = field(default_factory=AsrConfig)
    cleanup_backend: str = "rules"
    llm_model: str | None = None
    tolerance_s: float = 0.3
    limits: Limits | None = None  # None: the settings (ingest.archives.Limits.from_settings)
    salt: str | None = None  # None: settings.pseudonym_salt

    @classmethod
    def from_settings(cls, settings: Any = None, **kw: Any) -> IngestOptions:
        from core.settings import get_settings

        s = settings or get_settings()
        base = cls(AsrConfig.from_settings(s), s.cleanup_backend, s.llm_model, salt=s.pseudonym_salt.get_secret_value())
        return replace(base, **kw)


@dataclass
class Outcome:
    """What one input became: an episode and a sessions row, or quarantine records."""

    uri: str
    episodes: list[Episode] = field(default_factory=list)
    session_row: dict[str, Any] | None = None
    quarantined: list[Quarantined] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def session_id(self) -> str | None:
        return None if self.session_row is None else self.session_row["session_id"]


def _inside(folder: Path, rel: str, what: str) -> Path:
    p = (folder / rel).resolve()
    if not p.is_relative_to(folder.resolve()):
        raise IngestError("path_traversal", f"manifest {what} {rel!r} points outside the bundle", rel)
    return p


# --- reading --------------------------------------------------------------------------------------------------


def read_bundle(folder: Path, uri: str) -> SessionData:
    import jsonschema

    mp = folder / MANIFEST
    if not mp.is_file():
        raise IngestError("manifest_missing", "the bundle has no manifest.json", MANIFEST)
    try:
        raw = safejson.loads(mp.read_bytes(), "manifest.json", MANIFEST, finite=True)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IngestError("manifest_invalid_json", f"manifest.json is not JSON: {e}", MANIFEST) from None
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(load_schema()).iter_errors(raw))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise IngestError("manifest_invalid", f"manifest.json {where}: {err.message[:300]}", MANIFEST)
    m = BundleManifest.from_json(raw)
    ev_path = _inside(folder, m.events, "events")
    if not ev_path.is_file():
        raise IngestError("events_missing", f"the events file {m.events} is missing", m.events)
    for what, rel in (("audio", m.audio), ("video", m.video), ("transcript", m.transcript)):
        if rel and not _inside(folder, rel, what).is_file():
            raise IngestError(f"{what}_missing", f"the manifest names {what} {rel!r} but the file is missing", rel)
    if not m.screenshots and not m.video:
        raise IngestError("no_screen", "the bundle has neither screenshots nor a screen video")
    rows = parse_jsonl(ev_path.read_text(errors="replace"), m.events)
    table = to_table(rows, m.offset("events"))
    return SessionData(uri, folder, "bundle", m, table, folder_sha256(folder))


def read_input(folder: Path, uri: str) -> SessionData:
    kind = kind_of(folder)
    if kind == "agentnet":
        from ingest.agentnet import read_agentnet

        return read_agentnet(folder, uri)
    return read_bundle(folder, uri)


# --- screens ----------------------------------------------------------------------------------------------------


def _image_errors() -> tuple[type[Exception], ...]:
    """What Pillow raises on a corrupt image: OSError (UnidentifiedImageError), but also SyntaxError, ValueError
    (e.g. "Truncated IHDR chunk"), EOFError and struct.error from its format plugins, and DecompressionBombError."""
    import struct

    from PIL import Image

    return (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError)


def _screen_size(s: SessionData) -> tuple[int, int]:
    """Pixel size of the stored screenshots (the coordinate space of the actions)."""
    from PIL import Image

    m = s.manifest
    if m.screenshots:
        p = _inside(s.folder, m.screenshots[0].file, "screenshot")
        if not p.is_file():
            raise IngestError(
                "screenshot_missing", f"screenshot {m.screenshots[0].file} is missing", m.screenshots[0].file
            )
        try:
            with Image.open(p) as im:
                return im.size
        except _image_errors() as e:
            raise IngestError(
                "screenshot_corrupt", f"screenshot {m.screenshots[0].file}: {str(e)[:120]}", m.screenshots[0].file
            ) from None
    info = probe(_inside(s.folder, m.video or "", "video"))
    if info.width <= 0 or info.height <= 0:
        raise IngestError("video_no_frames", "the video stream has no frame size")
    return info.width, info.height


def _bundle_shots(s: SessionData, times: Sequence[float]) -> list[bytes]:
    """For each action time, the bundle screenshot taken last at or before it (the first one if none is)."""
    from PIL import Image

    m = s.manifest
    off = m.offset("screenshots")
    shots = sorted(m.screenshots, key=lambda x: x.t)
    st = [x.t + off for x in shots]
    if not all(math.isfinite(t) for t in st):
        raise IngestError("screenshot_bad_time", "a screenshot time is not finite")
    cache: dict[str, bytes] = {}
    out = []
    for t in times:
        i = max(0, sum(1 for x in st if x <= t) - 1)
        rel = shots[i].file
        if rel not in cache:
            p = _inside(s.folder, rel, "screenshot")
            if not p.is_file():
                raise IngestError("screenshot_missing", f"screenshot {rel} is missing", rel)
            data = p.read_bytes()
            try:
                with Image.open(io.BytesIO(data)) as im:
                    im.load()
            except _image_errors() as e:
                raise IngestError(
                    "screenshot_corrupt", f"screenshot {rel} does not decode: {str(e)[:120]}", rel
                ) from None
            cache[rel] = data
        out.append(cache[rel])
    return out


def screenshots_for(s: SessionData, times: Sequence[float]) -> list[bytes]:
    if s.manifest.screenshots:
        return _bundle_shots(s, times)
    video = _inside(s.folder, s.manifest.video or "", "video")
    off = s.manifest.offset("video")
    return frames_before(video, [t - off for t in times])


# --- ASR --------------------------------------------------------------------------------------------------------


def _declared_seconds(path: Path) -> float | None:
    import av

    try:
        with av.open(str(path)) as c:
            if not c.streams.audio:
                return None
            st = c.streams.audio[0]
            if st.duration and st.time_base:
                return float(st.duration * st.time_base)
            return c.duration / 1e6 if c.duration else None
    except Exception:  # noqa: BLE001 - decode errors are reported by load_audio
        return None


def speech_for(s: SessionData, opts: IngestOptions) -> Transcript | None:
    """The session's transcript on the session clock: ASR of the audio (per channel when the channels differ,
    primed with the session's vocabulary), or the bundle's transcript.jsonl."""
    m = s.manifest
    if m.audio:
        path = _inside(s.folder, m.audio, "audio")
        stereo = load_audio(path, split_stereo=True)
        declared = _declared_seconds(path)
        got = stereo.shape[-1] / 16000
        if declared and got < declared - 0.5:
            raise AudioError("audio_truncated", f"the audio header says {declared:.1f} s but only {got:.1f} s decode")
        prompt = vocabulary_prompt(m.instruction, m.app, m.elements)
        return transcribe_channels(stereo, opts.asr, prompt).shifted(m.offset("audio"))
    if m.transcript:
        from ingest.asr import Segment, Word

        rows = parse_jsonl(_inside(s.folder, m.transcript, "transcript").read_text(), m.transcript)
        off = m.offset("transcript")
        segs = []
        for r in rows:
            try:
                a, b, text = float(r["t_start"]) + off, float(r["t_end"]) + off, str(r["text"])
            except (KeyError, TypeError, ValueError):
                raise IngestError("transcript_invalid", f"{m.transcript} line {r['line']}: needs t_start, t_end, text",
                                  f"{m.transcript}:{r['line']}") from None  # fmt: skip
            words = text.split()
            dt = (b - a) / max(1, len(words))
            segs.append(
                Segment(
                    a,
                    b,
                    text,
                    1.0,
                    0.0,
                    tuple(Word(a + i * dt, a + (i + 1) * dt, " " + w, 1.0) for i, w in enumerate(words)),
                )
            )
        return Transcript("transcript.jsonl", None, 0.0, tuple(segs))
    return None


# --- one session ------------------------------------------------------------------------------------------------


def _actions(s: SessionData, scale: tuple[float, float], spoken: Sequence[float]) -> list[TimedAction]:
    actions = reduce_events(s.events, scale=scale, speech_times=spoken)
    if s.drop_after is not None:
        dropped = [a for a in actions if a.t_start > s.drop_after]
        actions = [a for a in actions if a.t_start <= s.drop_after]
        if dropped:
            s.meta["recorder_control_dropped"] = [format_action(a.action) for a in dropped]
    if not actions:
        raise IngestError("no_actions", "the events reduce to no action (only pointer moves or nothing)")
    return actions


def build_episode(
    s: SessionData, lake: Lake, round: int, opts: IngestOptions, timings: dict[str, float] | None = None
) -> tuple[Episode, dict[str, Any]]:
    """Run the pipeline on a read session; raises IngestError/EventError/AudioError/VideoError on bad input."""
    import time

    timings = timings if timings is not None else {}
    t0 = time.perf_counter()
    m = s.manifest
    validate(s.events, *(s.validate_size or (m.screen_width, m.screen_height)))
    shot_w, shot_h = _screen_size(s)
    scale = (shot_w / m.screen_width, shot_h / m.screen_height)
    actions = _actions(s, scale, ())  # no_actions is found before any model runs
    timings["events_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    transcript = speech_for(s, opts)
    timings["asr_s"] = time.perf_counter() - t0
    timings["audio_s"] = transcript.duration_s if transcript else 0.0

    t0 = time.perf_counter()
    spoken = (
        [(w.t_start + w.t_end) / 2 for g in transcript.segments if not g.flags for w in g.words] if transcript else []
    )
    if spoken:
        actions = _actions(s, scale, spoken)  # speech in a pause splits a keystroke run
    timings["events_s"] += time.perf_counter() - t0

    t0 = time.perf_counter()
    times = [a.t_start for a in actions]
    pngs = screenshots_for(s, times)
    uris = [lake.objects.put_object(p, ".png") for p in pngs]
    shas = [hashlib.sha256(p).hexdigest() for p in pngs]
    timings["screens_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    aligned, metrics = align_mod.align(times, transcript, opts.tolerance_s)
    gen = cleanup_mod.make_generator(opts.llm_model) if opts.cleanup_backend == "llm" else None
    steps = []
    off_screen = 0
    for i, (ta, sp) in enumerate(zip(actions, aligned)):
        c = cleanup_mod.clean(sp.raw, opts.cleanup_backend, gen) if sp.raw else cleanup_mod.Cleaned("")
        a = ta.action
        if a.kind == "type":
            a = Action("type", text=redact(a.text) or "")
        if any(v is not None and v >= lim for v, lim in ((a.x, shot_w), (a.y, shot_h), (a.x2, shot_w), (a.y2, shot_h))):
            off_screen += 1
        steps.append(
            Step(
                index=i,
                action=format_action(a),
                thought=redact(c.text) or "",
                raw_thought=redact(sp.raw) or "",
                thought_flag=sp.flag or c.flag,
                t_start=_round(ta.t_start, 3),
                t_end=_round(ta.t_end, 3),
                screenshot_uri=uris[i],
                screenshot_sha256=shas[i],
            )
        )
    problems = list(s.problems)
    if transcript is None:
        problems.append("no_audio")
    elif not metrics.thought_share:  # every step is flagged; the session says so too
        heard = any(st.thought_flag in ("other_language", UNRECOGNISED) for st in steps)
        problems.append("no_thoughts" if heard else "no_speech")  # speech no thought could be made of, or none
    for name, n in (("hallucinated_segments", metrics.hallucinated_segments),
                    ("other_language_segments", metrics.other_language_segments),
                    ("low_confidence_segments", metrics.low_confidence_segments),
                    ("unrecognised_speech_segments", metrics.unrecognised_segments)):  # fmt: skip
        if n:
            problems.append(f"{name}:{n}")
    rejected = sum(1 for st in steps if st.thought_flag == "llm_rejected")
    if rejected:
        problems.append(f"llm_rejected:{rejected}")
    language, language_prob = session_language(transcript.segments) if transcript else (None, None)
    if off_screen:
        problems.append(f"actions_outside_screenshot:{off_screen}")
    annotator = pseudonym(m.annotator_id, opts.salt)
    meta = redact_obj(
        {
            "bundle_kind": s.kind,
            "asr_model": transcript.model if transcript else None,
            "cleanup_backend": opts.cleanup_backend if gen is None else gen.name,
            "alignment_tolerance_s": opts.tolerance_s,
            "screen_recorded": [m.screen_width, m.screen_height],
            "bundle_meta": m.meta,
            "content_sha256": s.content_sha256,
            "asr_language": language,
            "asr_language_prob": language_prob,
            "transcript": utterances(transcript),
            **s.meta,
        }
    )
    now = datetime.now(UTC)
    ep = Episode(
        session_id=m.session_id,
        source=SOURCE,
        task_id=m.task_id or ("ta-" + hashlib.sha256(m.instruction.encode()).hexdigest()[:12]),
        instruction=redact(m.instruction) or "",
        steps=tuple(steps),
        round=round,
        app=redact(m.app),
        platform=redact(m.platform),
        screen_width=shot_w,
        screen_height=shot_h,
        annotator=annotator,
        group=m.group,
        outcome="ended",
        meta=meta,
        ingested_at=now,
    )
    end = max(
        [a.t_end for a in actions] + [transcript.duration_s + m.offset("audio") if transcript and m.audio else 0.0]
    )
    row = {
        "session_id": m.session_id,
        "source": SOURCE,
        "annotator": annotator,
        "group": m.group,
        "status": "landed",
        "landed_uri": s.uri,
        "content_sha256": s.content_sha256,
        "round": round,
        "n_episodes": 1,
        "n_actions": len(steps),
        "duration_s": _round(end, 3),
        "thought_share": metrics.thought_share,
        "speech_s": _round(metrics.speech_s, 3),
        "asr_model": transcript.model if transcript else None,
        "asr_confidence": metrics.asr_confidence,
        "unaligned_speech_s": metrics.unaligned_speech_s,
        "asr_language": language,
        "asr_language_prob": language_prob,
        "cleanup_rejections": rejected,
        "override_rate": None,
        "problems": problems,
        "pipeline_version": PIPELINE_VERSION,
        "ingested_at": now,
    }
    timings["rest_s"] = time.perf_counter() - t0
    return ep, row


def utterances(transcript: Transcript | None) -> list[dict[str, Any]]:
    """The raw transcript, every segment (flagged ones too: other languages are kept here, not as thoughts)."""
    return [
        {
            "t_start": _round(g.t_start, 3),
            "t_end": _round(g.t_end, 3),
            "channel": g.channel,
            "text": g.text,
            "language": g.language,
            "language_prob": None if g.language_prob is None else _round(g.language_prob, 4),
            "confidence": _round(g.confidence, 4),
            "flags": list(g.flags),
        }
        for g in (transcript.segments if transcript else ())
    ]


ERRORS = (InputError,)  # every reader raises a subclass (IngestError, EventError, AudioError, VideoError) or it


def known_sessions(lake: Lake, ids: Sequence[str]) -> dict[str, str]:
    """session_id -> content_sha256 for the given ids already in the sessions table."""
    if not ids:
        return {}
    t = lake.read("sessions", ["session_id", "content_sha256"], filter=pc.field("session_id").isin(list(ids)))
    return dict(zip(t.column("session_id").to_pylist(), t.column("content_sha256").to_pylist()))


def process_input(
    path: str | Path, lake: Lake, round: int = 0, opts: IngestOptions | None = None, uri: str | None = None
) -> Outcome:
    """One input -> an Outcome. Never raises for bad input (it becomes a quarantine record); lake I/O errors
    (LakeError) do raise, so an orchestrator can retry them."""
    opts = opts or IngestOptions.from_settings()
    path = Path(path)
    uri = uri or str(path.resolve())
    out = Outcome(uri)
    with tempfile.TemporaryDirectory(prefix="flywheel-ta-") as tmp:
        try:
            folder = open_input(path, Path(tmp), opts.limits)
            s = read_input(folder, uri)
            prior = known_sessions(lake, [s.manifest.session_id]).get(s.manifest.session_id)
            if prior == s.content_sha256:
                out.timings["skipped"] = 1.0  # same content already landed: nothing to do
                return out
            ep, row = build_episode(s, lake, round, opts, out.timings)
            if prior is not None:  # checked after the build, so a broken bundle keeps its own reason on every run
                raise IngestError("duplicate_session_id", f"session {s.manifest.session_id!r} already landed with "
                                  "different content", s.manifest.session_id)  # fmt: skip
            out.episodes.append(ep)
            out.session_row = row
        except ERRORS as e:
            out.quarantined.append(Quarantined(SOURCE, uri, e.code, str(e), getattr(e, "locator", None), round))
        except (
            ActionError
        ) as e:  # e.g. a hotkey with a quote key (ctrl+'): the grammar cannot write it (found by fuzzing)
            out.quarantined.append(
                Quarantined(
                    SOURCE,
                    uri,
                    "action_unrepresentable",
                    f"an action cannot be written in the grammar: {e}",
                    None,
                    round,
                )
            )
        except LakeError:
            raise
        except Exception as e:  # noqa: BLE001 - an unforeseen failure on one input must not stop the batch
            out.quarantined.append(
                Quarantined(SOURCE, uri, "internal_error", f"{type(e).__name__}: {str(e)[:500]}", None, round)
            )
    return out


def land_outcomes(lake: Lake, outcomes: Sequence[Outcome], round: int = 0) -> LandResult:
    """Land a batch: a session id that occurs twice with different content keeps the first, quarantines the rest."""
    seen: dict[str, str] = {}
    episodes: list[Episode] = []
    sessions: list[dict[str, Any]] = []
    quarantined: list[Quarantined] = []
    for o in outcomes:
        quarantined += o.quarantined
        if o.session_row is None:
            continue
        sid, sha = o.session_id, o.session_row["content_sha256"]
        if sid in seen:
            if seen[sid] != sha:
                quarantined.append(Quarantined(SOURCE, o.uri, "duplicate_session_id",
                                               f"session {sid!r} occurs twice in this run with different content", sid, round))  # fmt: skip
            continue
        seen[sid] = sha
        episodes += o.episodes
        sessions.append(o.session_row)
    from schemas.tables import SESSIONS

    return land(lake, episodes, pa.Table.from_pylist(sessions, schema=SESSIONS) if sessions else None, quarantined)


def ingest_paths(
    lake: Lake,
    paths: Iterable[str | Path],
    round: int = 0,
    opts: IngestOptions | None = None,
    progress: Callable[[Path, Outcome], None] | None = None,
) -> LandResult:
    """Discover inputs under `paths`, process each, land the batch. Idempotent."""
    opts = opts or IngestOptions.from_settings()
    outcomes = []
    with batch_models():
        for p in discover(paths):
            o = process_input(p, lake, round, opts)
            outcomes.append(o)
            if progress:
                progress(p, o)
    res = land_outcomes(lake, outcomes, round)
    res.extra["inputs"] = len(outcomes)
    res.extra["skipped_already_landed"] = sum(1 for o in outcomes if o.timings.get("skipped"))
    return res


def stage_landing(landing: str, workdir: Path) -> list[tuple[Path, str]]:
    """(local path, landed uri) of each input in a landing folder or under s3://bucket/prefix (downloaded)."""
    if not landing.startswith("s3://"):
        return [(p, str(p.resolve())) for p in discover([landing])]
    from storage.objects import open_object_store
    from storage.uri import parse_lake_uri

    store = open_object_store(parse_lake_uri(landing))
    for rel in store.list(""):
        data = store.get_bytes(rel)
        if data is None:
            continue
        dst = workdir / rel
        check_member(rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
    root = landing.rstrip("/")
    return [(p, f"{root}/{p.relative_to(workdir).as_posix()}") for p in discover([workdir])]
