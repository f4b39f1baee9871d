"""`flywheel upload`: check think-aloud bundles on the annotation lead's machine, then copy them to the landing area.

Why check before uploading: a broken bundle found at ingestion time is a quarantine row days later; found here it
is a message to the person who still has the recording. The checks are the ingestion's own reading
(ingest.think_aloud: safe archive opening, manifest schema, referenced files, events parse) plus what ingestion
would hit later: events validate and reduce to actions, audio decodes (and is not truncated), every screenshot and
the video decode. Before anything is extracted, the archive's directory is checked for absolute paths, '..',
links, special files, duplicate names, size limits and zip-bomb compression ratios.

Landing layout: `<landing>/<session_id>-<sha12>.zip|.tar.gz`, or a folder `<landing>/<session_id>-<sha12>/`.
The name holds the content hash (the same hash ingestion stores as sessions.content_sha256), so uploading the same
bundle again is a no-op and two different bundles never overwrite each other.
"""

from __future__ import annotations

import json
import re
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from ingest.archives import RATIO_FLOOR, Limits
from storage.errors import LakeError
from storage.objects import ObjectStore, open_object_store
from storage.uri import LakeURI, parse_lake_uri

UPLOADS = ".uploads"
_BAD_NAME = re.compile(r"(^/)|(^[A-Za-z]:)|\\|\x00")


@dataclass(frozen=True)
class Problem:
    code: str  # a fixed code, e.g. "path_traversal", "audio_undecodable", "manifest_invalid"
    message: str
    locator: str | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" + (f" ({self.locator})" if self.locator else "")


@dataclass(frozen=True)
class BundleCheck:
    """What the pre-upload check found in one bundle. `ok` means it may be uploaded."""

    path: Path
    kind: str  # folder | zip | tar.gz | unknown
    problems: tuple[Problem, ...] = ()
    session_id: str | None = None
    group: str | None = None
    sha256: str | None = None
    n_files: int = 0
    n_bytes: int = 0
    n_events: int = 0
    n_actions: int | None = None
    duration_s: float | None = None
    audio_s: float | None = None
    n_screenshots: int = 0
    has_transcript: bool = False
    thought_share: float | None = None  # only for transcript bundles: with audio it needs ASR (ingestion)
    annotator_id: str | None = field(default=None, repr=False)  # raw id: never printed, pseudonymised on use

    @property
    def ok(self) -> bool:
        return not self.problems


# ------------------------------------------------------------------------------------------- bundle access
@dataclass(frozen=True)
class _Member:
    name: str  # posix path relative to the bundle root
    size: int
    compressed: int | None = None


class _Bundle:
    """Read-only access to a folder, .zip or .tar.gz bundle by relative name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        name = path.name.lower()
        if path.is_dir():
            self.kind = "folder"
        elif name.endswith(".zip"):
            self.kind = "zip"
        elif name.endswith((".tar.gz", ".tgz")):
            self.kind = "tar.gz"
        else:
            self.kind = "unknown"
        self._zip: zipfile.ZipFile | None = None
        self._tar: tarfile.TarFile | None = None

    def __enter__(self) -> _Bundle:
        if self.kind == "zip":
            self._zip = zipfile.ZipFile(self.path)
        elif self.kind == "tar.gz":
            self._tar = tarfile.open(self.path, "r:gz")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._zip:
            self._zip.close()
        if self._tar:
            self._tar.close()

    def members(self) -> tuple[list[_Member], list[Problem]]:
        """Regular files with their sizes; links, devices and unsafe names become problems."""
        out: list[_Member] = []
        probs: list[Problem] = []
        if self.kind == "folder":
            root = self.path.resolve()
            for p in sorted(self.path.rglob("*")):
                rel = p.relative_to(self.path).as_posix()
                if p.is_symlink():
                    probs.append(Problem("link_in_bundle", "symbolic links are not allowed in a bundle", rel))
                elif p.is_file():
                    if not p.resolve().is_relative_to(root):
                        probs.append(Problem("path_traversal", "file resolves outside the bundle", rel))
                    else:
                        out.append(_Member(rel, p.stat().st_size))
        elif self._zip is not None:
            for zi in self._zip.infolist():
                mode = zi.external_attr >> 16
                if zi.is_dir():
                    continue
                if stat.S_ISLNK(mode):
                    probs.append(Problem("link_in_bundle", "symbolic links are not allowed in a bundle", zi.filename))
                    continue
                out.append(_Member(zi.filename, zi.file_size, zi.compress_size))
        elif self._tar is not None:
            for ti in self._tar.getmembers():
                if ti.isdir():
                    continue
                if ti.issym() or ti.islnk():
                    probs.append(
                        Problem("link_in_bundle", f"links are not allowed in a bundle (-> {ti.linkname})", ti.name)
                    )
                    continue
                if not ti.isfile():
                    probs.append(Problem("special_file", "only regular files are allowed in a bundle", ti.name))
                    continue
                out.append(_Member(ti.name, ti.size))
        return out, probs


def _name_problem(name: str) -> Problem | None:
    if _BAD_NAME.search(name):
        return Problem("path_traversal", "absolute path, drive letter, backslash or NUL in a member name", name)
    if ".." in PurePosixPath(name).parts:
        return Problem("path_traversal", "'..' in a member name", name)
    return None


# ------------------------------------------------------------------------------------------------- checks
def check_bundle(path: Path, limits: Limits | None = None) -> BundleCheck:
    """Run every pre-upload check on one bundle; never raises for a bad bundle (problems say what is wrong).
    `limits`: ingestion's own (default: the settings), so a bundle that passes here passes ingestion."""
    limits = limits or Limits.from_settings()
    b = _Bundle(path)
    if not path.exists():
        return BundleCheck(path, "unknown", (Problem("not_found", f"{path} does not exist"),))
    if b.kind == "unknown":
        return BundleCheck(path, "unknown", (Problem("not_a_bundle", "a bundle is a folder, a .zip or a .tar.gz"),))
    try:
        with b:
            members, probs = b.members()
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as e:
        return BundleCheck(path, b.kind, (Problem("archive_corrupt", f"{type(e).__name__}: {str(e)[:200]}"),))
    base, layout = _check_layout(b, members, limits)
    probs += layout
    if probs:  # never extract a bundle whose layout is already unsafe
        return replace(base, problems=tuple(probs))
    with tempfile.TemporaryDirectory(prefix="flywheel-upload-") as tmp:
        return _check_contents(path, Path(tmp), base, limits)


def _check_layout(b: _Bundle, members: list[_Member], limits: Limits) -> tuple[BundleCheck, list[Problem]]:
    """Names, links, sizes and compression ratios, read from the archive's directory without extracting."""
    probs: list[Problem] = []
    names: dict[str, _Member] = {}
    for m in members:
        p = _name_problem(m.name)
        if p:
            probs.append(p)
            continue
        norm = PurePosixPath(m.name).as_posix().removeprefix("./")
        if norm in names:
            probs.append(Problem("duplicate_member", "the same name appears twice in the archive", norm))
        names[norm] = m
    total = sum(m.size for m in names.values())
    if len(names) > limits.max_files:
        probs.append(Problem("too_many_files", f"{len(names)} files, over the limit of {limits.max_files}"))
    if total > limits.max_bundle_bytes:
        probs.append(
            Problem("too_large", f"{total / 1e9:.2f} GB uncompressed, over {limits.max_bundle_bytes / 1e9:.2f} GB")
        )
    for m in names.values():
        if m.size > limits.max_file_bytes:
            probs.append(
                Problem("file_too_large", f"{m.size / 1e9:.2f} GB, over {limits.max_file_bytes / 1e9:.2f} GB", m.name)
            )
        if m.compressed and m.size > RATIO_FLOOR and m.size / max(m.compressed, 1) > limits.max_ratio:
            probs.append(Problem("zip_bomb", f"compression ratio {m.size / m.compressed:.0f}:1", m.name))
    return BundleCheck(b.path, b.kind, n_files=len(names), n_bytes=total), probs


def _check_contents(path: Path, tmp: Path, base: BundleCheck, limits: Limits) -> BundleCheck:
    """The ingestion's own reading (ingest.think_aloud), plus decoding every medium, without ASR or storage."""
    from ingest import think_aloud as ta
    from ingest.asr import SAMPLE_RATE, load_audio
    from ingest.events import reduce_events, validate

    probs: list[Problem] = []
    info: dict[str, Any] = {}
    try:
        folder = ta.open_input(path, tmp, limits)
        s = ta.read_input(folder, str(path.resolve()))
    except ta.ERRORS as e:
        return replace(base, problems=(Problem(getattr(e, "code", "unreadable"), str(e), getattr(e, "locator", None)),))
    m = s.manifest
    info.update(session_id=m.session_id, group=m.group, sha256=s.content_sha256, n_screenshots=len(m.screenshots),
                n_events=s.events.num_rows, has_transcript=bool(m.transcript), annotator_id=m.annotator_id)  # fmt: skip
    last_t = 0.0

    def attempt(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ta.ERRORS as e:
            probs.append(Problem(getattr(e, "code", "unreadable"), str(e), getattr(e, "locator", None)))
        return None

    actions = []
    if attempt(lambda: validate(s.events, *(s.validate_size or (m.screen_width, m.screen_height))) or True):
        actions = reduce_events(s.events)
        info["n_actions"] = len(actions)
        if not actions:
            probs.append(Problem("no_actions", "the events reduce to no action (only pointer moves or nothing)"))
        last_t = max([a.t_end for a in actions], default=0.0)
    attempt(lambda: ta._screen_size(s))
    for shot in m.screenshots:
        p = attempt(lambda shot=shot: _check_image(ta._inside(folder, shot.file, "screenshot")))
        if p:
            probs.append(replace(p, locator=shot.file))
    if m.video:
        p = attempt(lambda: _check_video(ta._inside(folder, m.video or "", "video")))
        if p:
            probs.append(replace(p, locator=m.video))
    if m.audio:
        audio = attempt(lambda: load_audio(ta._inside(folder, m.audio or "", "audio")))
        if audio is not None:
            info["audio_s"] = round(audio.size / SAMPLE_RATE, 3)
            declared = ta._declared_seconds(ta._inside(folder, m.audio, "audio"))
            if declared and info["audio_s"] < declared - 0.5:
                probs.append(
                    Problem(
                        "audio_truncated",
                        f"the audio header says {declared:.1f} s but only {info['audio_s']:.1f} s decode",
                        m.audio,
                    )
                )
            last_t = max(last_t, info["audio_s"] + m.offset("audio"))
    elif m.transcript:
        tr = attempt(lambda: ta.speech_for(s, ta.IngestOptions()))  # no audio: this only parses transcript.jsonl
        if tr is not None and tr.segments:
            last_t = max(last_t, max(seg.t_end for seg in tr.segments))
            if actions:
                from ingest.align import align

                info["thought_share"] = align([a.t_start for a in actions], tr, ta.IngestOptions().tolerance_s)[
                    1
                ].thought_share
    info["duration_s"] = round(last_t, 3)
    return replace(base, problems=tuple(probs), **info)


def _check_image(p: Path) -> Problem | None:
    from PIL import Image

    try:
        with Image.open(p) as im:
            im.load()
    except Exception as e:  # noqa: BLE001 - PIL raises many types for broken images
        return Problem("screenshot_corrupt", f"does not decode: {type(e).__name__}: {str(e)[:200]}")
    return None


def _check_video(p: Path) -> Problem | None:
    import av

    try:
        with av.open(str(p)) as c:
            if not c.streams.video:
                return Problem("video_no_frames", "the video file has no video stream")
            next(c.decode(video=0))
    except StopIteration:
        return Problem("video_no_frames", "the video has no decodable frame")
    except Exception as e:  # noqa: BLE001 - PyAV raises many types for broken files
        return Problem("video_undecodable", f"{type(e).__name__}: {str(e)[:200]}")
    return None


# ------------------------------------------------------------------------------------------------- landing
@dataclass
class Landing:
    """The landing area: a local folder or s3://bucket/prefix (boto3 with the lake's S3 settings).

    Bundles lie at its top level, as `flywheel ingest think-aloud LANDING` discovers them. A folder bundle's key
    file (manifest.json, or metadata.json for AgentNet) is copied last, so a half-copied folder is never taken
    for a bundle. `.uploads/<name>.json` records who uploaded what (pseudonymous annotator, group, checks);
    ingestion skips dot-entries.
    """

    uri: LakeURI
    store: ObjectStore

    @classmethod
    def open(cls, location: str) -> Landing:
        uri = parse_lake_uri(location)
        return cls(uri, open_object_store(uri))

    @staticmethod
    def name(check: BundleCheck) -> str:
        """Name of the bundle in the landing area: session id and content hash (re-uploads are no-ops)."""
        assert check.sha256 and check.session_id
        return f"{check.session_id}-{check.sha256[:12]}" + {"zip": ".zip", "tar.gz": ".tar.gz"}.get(check.kind, "")

    def landed(self, check: BundleCheck) -> bool:
        rel = self.name(check)
        return self.store.exists(f"{rel}/{_key_file(check.path)}" if check.kind == "folder" else rel)

    def put_file(self, src: Path, rel: str, progress: Callable[[int], None]) -> None:
        """Copy one file (streamed; multipart on S3), calling progress(bytes) as it goes."""
        if self.uri.scheme == "s3":
            client = self.store.client  # type: ignore[attr-defined]
            try:
                client.upload_file(str(src), self.uri.bucket, self.uri.key(rel), Callback=progress)
            except Exception as e:  # noqa: BLE001 - boto3's transfer manager wraps errors in several types
                raise LakeError(f"upload of {src.name} to {self.uri.join(rel)} failed: {str(e)[:200]}") from None
            return
        dst = Path(self.uri.key(rel))
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".tmp-{dst.name}")
        try:
            with src.open("rb") as fi, tmp.open("wb") as fo:
                for chunk in iter(lambda: fi.read(1 << 20), b""):
                    fo.write(chunk)
                    progress(len(chunk))
            tmp.replace(dst)
        finally:
            tmp.unlink(missing_ok=True)

    def upload(self, check: BundleCheck, progress: Callable[[int], None]) -> tuple[str, bool]:
        """Upload a checked bundle; return (landed URI, uploaded now). A bundle already there is not sent again."""
        if not check.ok:
            raise ValueError(f"{check.path} did not pass its checks")
        rel = self.name(check)
        if self.landed(check):
            progress(upload_size(check))
            return self.uri.join(rel), False
        if check.kind == "folder":
            key = _key_file(check.path)
            files = [f for f in _files(check.path) if f.relative_to(check.path).as_posix() != key]
            for f in [*files, check.path / key]:
                self.put_file(f, f"{rel}/{f.relative_to(check.path).as_posix()}", progress)
        else:
            self.put_file(check.path, rel, progress)
        self.store.put_text(f"{UPLOADS}/{rel}.json", json.dumps(upload_record(check, self.uri.join(rel)), indent=2))
        return self.uri.join(rel), True

    def records(self) -> list[dict[str, Any]]:
        """The upload records (one per landed bundle): landed_uri, session_id, sha256, annotator, group, ..."""
        out = []
        for k in self.store.list(UPLOADS):
            raw = self.store.get_text(k)
            if raw:
                out.append(json.loads(raw))
        return out


def upload_record(check: BundleCheck, landed_uri: str) -> dict[str, Any]:
    from ingest.pii import pseudonym

    return {
        "landed_uri": landed_uri, "session_id": check.session_id, "content_sha256": check.sha256,
        "annotator": pseudonym(check.annotator_id), "group": check.group, "kind": check.kind, "bytes": check.n_bytes,
        "n_actions": check.n_actions, "duration_s": check.duration_s, "audio_s": check.audio_s,
        "uploaded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }  # fmt: skip


def _key_file(folder: Path) -> str:
    return "manifest.json" if (folder / "manifest.json").is_file() else "metadata.json"


def _files(folder: Path) -> Iterator[Path]:
    yield from (p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink())


def ingest_landed(lake: Any, landing: Landing, landed_uris: list[str], round: int) -> dict[str, dict[str, Any]]:
    """Run the think-aloud ingestion on landed bundles; return landed_uri -> its `session_status` row.

    A local landing area is ingested in place; an S3 one is staged to a temporary folder first (as
    `flywheel ingest think-aloud s3://...` does), and the rows are matched back by content hash.
    """
    from ingest import think_aloud as ta

    by_sha = {r["landed_uri"]: r["content_sha256"] for r in landing.records() if r["landed_uri"] in landed_uris}
    if landing.uri.scheme == "file":
        ta.ingest_paths(lake, [Path(u) for u in landed_uris], round)
    else:
        with tempfile.TemporaryDirectory(prefix="flywheel-upload-ingest-") as tmp:
            paths = []
            for u in landed_uris:
                rel = landing.store.rel(u)  # type: ignore[attr-defined]
                keys = [rel] if rel.endswith((".zip", ".tar.gz")) else landing.store.list(rel + "/")
                for k in keys:
                    data = landing.store.get_bytes(k)
                    dst = Path(tmp, k)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_bytes(data or b"")
                paths.append(Path(tmp, rel))
            ta.ingest_paths(lake, paths, round)
    con = lake.duckdb(tables=["sessions", "quarantine"])
    rows = con.sql("SELECT * FROM session_status").to_arrow_table().to_pylist()
    sha_of = {}
    for r in rows:
        sha = r.get("content_sha256")
        if sha:
            sha_of[sha] = r
    out: dict[str, dict[str, Any]] = {}
    for u in landed_uris:
        r = sha_of.get(by_sha.get(u, "")) or next((x for x in rows if x["landed_uri"] == u), None)
        if r is not None:
            out[u] = r
    return out


def upload_size(check: BundleCheck) -> int:
    return check.n_bytes if check.kind == "folder" else check.path.stat().st_size


@dataclass
class UploadOutcome:
    check: BundleCheck
    landed_uri: str | None = None
    uploaded: bool = False
    error: str | None = None
    session: dict[str, Any] | None = None  # the sessions row after --ingest
    ingest_note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if not self.check.ok:
            return "refused"
        if self.error:
            return "failed"
        return "uploaded" if self.uploaded else "already landed"
