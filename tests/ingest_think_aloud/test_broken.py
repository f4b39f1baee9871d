"""Bad input: every broken bundle lands in quarantine with its own reason; the good ones of the same run land."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.archives import Limits
from ingest.think_aloud import IngestOptions, ingest_paths
from tests.ingest_think_aloud import scripted

LIMIT = 3 * 1024 * 1024


def _copy(src: Path, dst: Path, edit: Callable[[Path], None] | None = None) -> Path:
    shutil.copytree(src, dst)
    if edit:
        edit(dst)
    return dst


def _manifest(p: Path, **changes: object) -> None:
    m = json.loads((p / "manifest.json").read_text())
    for k, v in changes.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    (p / "manifest.json").write_text(json.dumps(m))


def _events(p: Path, fn: Callable[[list[dict]], list[dict]]) -> None:
    ev = [json.loads(line) for line in (p / "events.jsonl").read_text().splitlines()]
    (p / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in fn(ev)))


def _with_audio(data: bytes, name: str = "audio.wav") -> Callable[[Path], None]:
    def edit(p: Path) -> None:
        (p / name).write_bytes(data)
        _manifest(p, audio=name)

    return edit


def _nan_time(ev: list[dict]) -> list[dict]:
    ev[3]["t"] = math.nan
    return ev


def _swap(ev: list[dict]) -> list[dict]:
    ev[2]["t"], ev[5]["t"] = ev[5]["t"], ev[2]["t"]
    return ev


def _off_screen(ev: list[dict]) -> list[dict]:
    for e in ev:
        if e["type"] == "mouse_down":
            e["x"] = scripted.W + 50
            break
    return ev


def _unknown(ev: list[dict]) -> list[dict]:
    return ev[:4] + [{"t": ev[4]["t"], "type": "touch_start", "x": 1, "y": 1}] + ev[4:]


def _zip(dst: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return dst


def _flac_truncated(good_wav: bytes, tmp: Path) -> bytes:
    (tmp / "in.wav").write_bytes(good_wav)
    subprocess.run(["sox", str(tmp / "in.wav"), str(tmp / "out.flac")], check=True)
    b = (tmp / "out.flac").read_bytes()
    return b[: len(b) // 3]


@pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed")
def test_broken_bundles_are_quarantined_each_with_its_reason(lake, text_bundle_dir: Path, tmp_path: Path) -> None:
    good = text_bundle_dir
    land = tmp_path / "landing"
    land.mkdir()
    import numpy as np
    import soundfile as sf

    wav = io.BytesIO()
    sf.write(wav, (0.1 * np.sin(np.arange(16000 * 3) / 5)).astype("float32"), 16000, format="WAV")
    wav_bytes = wav.getvalue()

    expected: dict[str, str] = {}

    def case(name: str, code: str, make: Callable[[Path], Path]) -> None:
        make(land / name)
        expected[name] = code

    case("a-not-audio", "audio_undecodable", lambda d: _copy(good, d, _with_audio(b"this is not audio at all" * 50)))
    case("b-zero-audio", "audio_empty", lambda d: _copy(good, d, _with_audio(b"")))
    case(
        "c-truncated-audio",
        "audio_truncated",
        lambda d: _copy(good, d, _with_audio(_flac_truncated(wav_bytes, tmp_path), "audio.flac")),
    )
    case("d-no-manifest", "manifest_missing", lambda d: _copy(good, d, lambda p: (p / "manifest.json").unlink()))
    case(
        "e-manifest-json",
        "manifest_invalid_json",
        lambda d: _copy(good, d, lambda p: (p / "manifest.json").write_text("{oops")),
    )
    case("f-manifest-schema", "manifest_invalid", lambda d: _copy(good, d, lambda p: _manifest(p, instruction=None)))
    case("g-events-missing", "events_missing", lambda d: _copy(good, d, lambda p: (p / "events.jsonl").unlink()))
    case(
        "h-events-json",
        "events_invalid_json",
        lambda d: _copy(good, d, lambda p: (p / "events.jsonl").write_text('{"t": 1, "type": "mouse_down"\n')),
    )
    case("i-out-of-order", "events_out_of_order", lambda d: _copy(good, d, lambda p: _events(p, _swap)))
    case("j-nan-time", "event_bad_time", lambda d: _copy(good, d, lambda p: _events(p, _nan_time)))
    case("k-off-screen", "event_off_screen", lambda d: _copy(good, d, lambda p: _events(p, _off_screen)))
    case("l-unknown-event", "event_unknown_type", lambda d: _copy(good, d, lambda p: _events(p, _unknown)))
    case(
        "m-moves-only",
        "no_actions",
        lambda d: _copy(good, d, lambda p: _events(p, lambda ev: [e for e in ev if e["type"] == "mouse_move"])),
    )
    case(
        "n-shot-missing",
        "screenshot_missing",
        lambda d: _copy(good, d, lambda p: (p / "screenshots" / "0003.png").unlink()),
    )
    case(
        "o-shot-corrupt",
        "screenshot_corrupt",
        lambda d: _copy(good, d, lambda p: (p / "screenshots" / "0002.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")),
    )
    case(
        "p-no-screen",
        "no_screen",
        lambda d: _copy(good, d, lambda p: (shutil.rmtree(p / "screenshots"), _manifest(p, screenshots=[]))),
    )

    def no_frames(d: Path) -> Path:
        _copy(good, d, lambda p: (shutil.rmtree(p / "screenshots"), _manifest(p, screenshots=None)))
        (d / "screen.mp4").write_bytes(b"")
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=d=1", str(d / "screen.mp4")], check=True
        )
        _manifest(d, video="screen.mp4")
        return d

    case("q-video-no-frames", "video_no_frames", no_frames)
    ok_files = {p.relative_to(good).as_posix(): p.read_bytes() for p in good.rglob("*") if p.is_file()}
    case("r-traversal.zip", "archive_path_traversal", lambda d: _zip(d, {**ok_files, "../evil.txt": b"x"}))

    def absolute(d: Path) -> Path:
        with tarfile.open(d, "w:gz") as t:
            for name, data in {**ok_files, "/tmp/evil.txt": b"x"}.items():
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
        return d

    case("s-absolute.tar.gz", "archive_absolute_path", absolute)
    case(
        "t-too-large.zip",
        "archive_too_large",
        lambda d: _zip(d, {**ok_files, "pad.bin": np.random.default_rng(0).bytes(LIMIT)}),
    )
    case(
        "u-corrupt.zip",
        "archive_corrupt",
        lambda d: d.write_bytes(_zip(tmp_path / "c.zip", ok_files).read_bytes()[:300]),
    )
    case(
        "v-duplicate-id",
        "duplicate_session_id",
        lambda d: _copy(good, d, lambda p: _manifest(p, instruction="something else entirely")),
    )
    case("w-stray.txt", "unknown_input", lambda d: d.write_text("notes"))
    case(
        "x-bad-transcript",
        "transcript_invalid",
        lambda d: _copy(good, d, lambda p: (p / "transcript.jsonl").write_text('{"text": "hi"}\n')),
    )
    shutil.copytree(good, land / "0-good")  # sorted first: its session id is the one "v-duplicate-id" reuses
    good_zip = scripted.build(tmp_path / "good2", session_id="ta-good-2", archive="tar.gz", speech=False)
    shutil.copy(good_zip, land / "1-good2.tar.gz")

    opts = IngestOptions(limits=Limits.from_settings(max_bundle_bytes=LIMIT))
    res = ingest_paths(lake, [land], round=3, opts=opts)
    assert res.episodes_added == 2 and res.sessions_added == 2
    q = {Path(r["landed_uri"]).name: r for r in lake.read("quarantine").to_pylist()}
    got = {name: q[name]["error_type"] for name in expected if name in q}
    assert got == expected, {
        k: (got.get(k), v, q.get(k, {}).get("error")) for k, v in expected.items() if got.get(k) != v
    }
    assert len(set(expected.values())) == len(expected) >= 15
    assert all(r["error"] and r["round"] == 3 for r in q.values())
    assert sorted(lake.read("sessions").column("session_id").to_pylist()) == ["ta-good-2", "ta-text-1"]
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()
    # the whole run again: nothing new anywhere
    again = ingest_paths(lake, [land], round=3, opts=opts)
    assert (again.episodes_added, again.sessions_added, again.quarantined_added) == (0, 0, 0)
