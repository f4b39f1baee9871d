"""`flywheel upload`: bad bundles are refused before upload with the reason; good ones land (local or S3) once;
--ingest lands sessions; `flywheel sessions` shows landed, quarantined (with the reason) and not-yet-ingested."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flywheel.cli import app
from flywheel.people.upload import Landing, Limits, check_bundle
from ingest.formats.bundle import (
    BundleManifest,
    ScriptedStep,
    build_think_aloud_bundle,
    click_events,
    type_events,
    write_bundle,
)


def _png(color: str) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (160, 120), color).save(b, "PNG")
    return b.getvalue()


def _bundle(
    out: Path,
    sid: str,
    archive: str | None = None,
    instruction: str = "Open settings and type hi",
    annotator: str = "ann@example.com",
) -> Path:
    m = BundleManifest(
        session_id=sid,
        instruction=instruction,
        screen_width=160,
        screen_height=120,
        annotator_id=annotator,
        group="novice",
    )
    steps = [
        ScriptedStep("I open the settings", click_events(20, 30), _png("red")),
        ScriptedStep("then I type hi", type_events("hi"), _png("blue")),
    ]
    return build_think_aloud_bundle(out, m, steps, speech=False, archive=archive)


def _wav(seconds: float = 1.0) -> bytes:
    import numpy as np
    import soundfile as sf

    t = np.arange(int(16000 * seconds)) / 16000
    b = io.BytesIO()
    sf.write(b, (0.1 * np.sin(2 * np.pi * 440 * t)).astype("float32"), 16000, format="WAV")
    return b.getvalue()


def _codes(p: Path, **kw) -> list[str]:
    return [x.code for x in check_bundle(p, **kw).problems]


def test_good_bundles_pass_with_their_numbers(tmp_path: Path) -> None:
    for archive in (None, "zip", "tar.gz"):
        c = check_bundle(_bundle(tmp_path / f"b-{archive}", "s1", archive))
        assert c.ok, c.problems
        assert (c.session_id, c.n_actions, c.n_screenshots, c.thought_share) == ("s1", 2, 2, 1.0)
        assert c.duration_s and c.duration_s > 2
    # the three forms of one bundle have one content hash (the one ingestion stores)
    shas = {check_bundle(tmp_path / n).sha256 for n in ("b-None", "b-zip.zip", "b-tar.gz.tar.gz")}
    assert len(shas) == 1
    # a bundle with real audio: decoded, its length measured
    m = BundleManifest(session_id="a1", instruction="x", screen_width=160, screen_height=120)
    p = write_bundle(tmp_path / "audio", m, click_events(5, 5), audio=_wav(1.5), screenshots=[(0.0, _png("red"))])
    c = check_bundle(p)
    assert c.ok and c.audio_s == pytest.approx(1.5, abs=0.01)


def test_bad_bundles_are_refused_with_the_reason(tmp_path: Path) -> None:
    good = _bundle(tmp_path / "good", "g1")
    files = {p.relative_to(good).as_posix(): p.read_bytes() for p in good.rglob("*") if p.is_file()}

    def zipped(name: str, extra: dict[str, bytes] | None = None, drop: tuple[str, ...] = ()) -> Path:
        z = tmp_path / name
        with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as f:
            for k, v in {**files, **(extra or {})}.items():
                if k not in drop:
                    f.writestr(k, v)
        return z

    def folder(name: str, changes: dict[str, bytes]) -> Path:
        d = tmp_path / name
        for k, v in {**files, **changes}.items():
            (d / k).parent.mkdir(parents=True, exist_ok=True)
            (d / k).write_bytes(v)
        return d

    assert _codes(zipped("trav.zip", {"../evil.txt": b"x"})) == ["path_traversal"]
    assert _codes(zipped("abs.zip", {"/etc/evil": b"x"})) == ["path_traversal"]
    assert _codes(zipped("bomb.zip", {"pad.bin": bytes(4 * 1024**2)})) == ["zip_bomb"]
    assert _codes(zipped("nomanifest.zip", drop=("manifest.json",))) == ["manifest_missing"]
    tl = tmp_path / "link.tar.gz"
    with tarfile.open(tl, "w:gz") as t:
        for k, v in files.items():
            ti = tarfile.TarInfo(k)
            ti.size = len(v)
            t.addfile(ti, io.BytesIO(v))
        ln = tarfile.TarInfo("screenshots/x.png")
        ln.type, ln.linkname = tarfile.SYMTYPE, "/etc/passwd"
        t.addfile(ln)
    assert _codes(tl) == ["link_in_bundle"]
    man = json.loads(files["manifest.json"])
    assert _codes(folder("schema", {"manifest.json": json.dumps({**man, "instruction": ""}).encode()})) == [
        "manifest_invalid"
    ]
    assert _codes(folder("events", {"events.jsonl": files["events.jsonl"] + b"{not json\n"})) == ["events_invalid_json"]
    assert _codes(folder("shot", {"screenshots/0001.png": b"\x89PNG broken"})) == ["screenshot_corrupt"]
    man_audio = {**man, "audio": "audio.wav"}
    assert _codes(
        folder("audio", {"manifest.json": json.dumps(man_audio).encode(), "audio.wav": b"RIFF....garbage"})
    ) == ["audio_undecodable"]
    assert _codes(folder("missing", {"manifest.json": json.dumps({**man, "audio": "nope.wav"}).encode()})) == [
        "audio_missing"
    ]
    assert _codes(good, limits=Limits.from_settings(max_bundle_bytes=1000)) == ["too_large"]
    (tmp_path / "notes.txt").write_text("hi")
    assert _codes(tmp_path / "notes.txt") == ["not_a_bundle"]


def _invoke(args: list[str]):
    """Run the CLI with a wide console: rich reads COLUMNS once, when the shared console is created."""
    from core.console import console, err_console

    widths = console.width, err_console.width
    console.width = err_console.width = 250
    try:
        return CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    finally:
        console.width, err_console.width = widths


def test_upload_local_then_ingest_then_sessions(lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    landing = tmp_path / "landing"
    b1 = _bundle(tmp_path / "b1", "s1", "zip")
    b2 = _bundle(tmp_path / "b2", "s2")
    clash = _bundle(
        tmp_path / "b3", "s1", "tar.gz", instruction="another task entirely", annotator="bob@example.com"
    )  # same id, new content
    later = _bundle(tmp_path / "b4", "s4", "zip")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../x", "x")
    r = _invoke(
        [
            "upload",
            str(b1),
            str(b2),
            str(clash),
            str(evil),
            "--landing",
            str(landing),
            "--lake",
            str(lake.uri),
            "--ingest",
            "--round",
            "2",
        ]
    )
    assert r.exit_code == 1
    assert "1 of 4 bundle(s) not uploaded: evil.zip: path_traversal" in r.output
    landed = sorted(p.name for p in landing.iterdir())
    assert landed[0] == ".uploads" and len(landed) == 4
    assert any(n.startswith("s1-") and n.endswith(".zip") for n in landed) and any(n.startswith("s2-") for n in landed)
    rows = {r["session_id"]: r for r in lake.read("sessions").to_pylist()}
    assert set(rows) == {"s1", "s2"} and rows["s1"]["round"] == 2 and rows["s1"]["thought_share"] == 1.0
    q = lake.read("quarantine").to_pylist()
    assert [x["error_type"] for x in q] == ["duplicate_session_id"]
    # the same bundles again: nothing uploaded, nothing added
    r = _invoke(["upload", str(b1), str(b2), "--landing", str(landing), "--lake", str(lake.uri), "--ingest"])
    assert r.exit_code == 0 and r.output.count("already landed") == 2
    assert lake.count("sessions") == 2
    r = _invoke(["upload", str(later), "--landing", str(landing)])  # uploaded, not ingested
    assert r.exit_code == 0 and "uploaded" in r.output
    r = _invoke(["sessions", "--lake", str(lake.uri), "--landing", str(landing), "--format", "json"])
    assert r.exit_code == 0, r.output
    got = {x["session_id"]: x for x in map(json.loads, r.stdout.splitlines()) if x}
    clash_name = next(n for n in landed if n.endswith(".tar.gz"))[: -len(".tar.gz")]  # s1-<sha12>: ingestion refused it
    assert {k: v["status"] for k, v in got.items()} == {
        "s1": "landed",
        "s2": "landed",
        "s4": "uploaded",
        clash_name: "quarantined",
    }
    quarantined = next(v for v in got.values() if v["status"] == "quarantined")
    assert quarantined["reason"].startswith("duplicate_session_id") and quarantined["group"] == "novice"
    assert quarantined["annotator"].startswith("anon-")  # from the upload record, pseudonymous
    r = _invoke(["sessions", "--lake", str(lake.uri), "--landing", str(landing), "--summary", "--format", "json"])
    summary = [json.loads(x) for x in r.stdout.splitlines() if x]
    assert sum(x["sessions"] for x in summary) == 4 and sum(x["quarantined"] for x in summary) == 1
    assert list(work.iterdir()) == []  # nothing written in the working directory
    assert "ann@example.com" not in json.dumps(Landing.open(str(landing)).records())


def test_upload_to_s3_landing_and_ingest(s3_lake, moto_server, tmp_path: Path) -> None:
    bucket = moto_server.new_bucket()
    landing = f"s3://{bucket}/incoming"
    b1 = _bundle(tmp_path / "b1", "s3-1", "zip")
    b2 = _bundle(tmp_path / "b2", "s3-2")
    r = _invoke(["upload", str(b1), str(b2), "--landing", landing, "--lake", str(s3_lake.uri), "--ingest"])
    assert r.exit_code == 0, r.output
    keys = [o["Key"] for o in moto_server.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.startswith("incoming/s3-1-") and k.endswith(".zip") for k in keys)
    assert any(k.startswith("incoming/s3-2-") and k.endswith("/manifest.json") for k in keys)
    assert {r["session_id"] for r in s3_lake.read("sessions").to_pylist()} == {"s3-1", "s3-2"}
    assert len(Landing.open(landing).records()) == 2
    r = _invoke(["sessions", "--lake", str(s3_lake.uri), "--landing", landing, "--format", "csv"])
    assert r.exit_code == 0 and r.stdout.count("landed") >= 2 and "uploaded" not in r.stdout
