"""Safe opening of what people hand in: bundle folders and .zip / .tar.gz archives are checked (member paths,
links, sizes, decompression bombs) before anything is extracted, and hashed by content.

The size limits are one set (`Limits`, from the core settings `bundle_max_*`), shared by ingestion and by
`flywheel upload`'s checks, and applied to folders as to archives."""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from ingest.formats.bundle import MANIFEST
from ingest.session import IngestError

#: Small members may compress well (a blank screenshot): only bigger ones are judged by their compression ratio.
RATIO_FLOOR = 1024**2
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz")


@dataclass(frozen=True)
class Limits:
    """The size limits of one bundle (folder or archive), unpacked. `max_ratio`: unpacked / packed size beyond which
    a member (zip) or the whole archive (tar.gz) is a decompression bomb; real bundles (audio, PNG, video, JSON)
    stay far below. Build with `Limits.from_settings()`: the values are settings, not constants."""

    max_bundle_bytes: int
    max_file_bytes: int
    max_files: int
    max_ratio: float

    @classmethod
    def from_settings(cls, settings: Any = None, **overrides: Any) -> Limits:
        from core.settings import get_settings

        s = settings or get_settings()
        base = cls(s.bundle_max_bytes, s.bundle_max_file_bytes, s.bundle_max_files, s.bundle_max_ratio)
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def check_sizes(self, what: str, sizes: list[tuple[str, int]]) -> None:
        """Refuse a bundle whose files (name, unpacked size) are too many or too large, before anything is read."""
        if len(sizes) > self.max_files:
            raise IngestError(f"{what}_too_many_files", f"{what} holds {len(sizes):,} files, over the "
                              f"{self.max_files:,} limit (bundle_max_files)")  # fmt: skip
        total = sum(n for _, n in sizes)
        if total > self.max_bundle_bytes:
            raise IngestError(f"{what}_too_large", f"{what} unpacks to {total:,} bytes, over the "
                              f"{self.max_bundle_bytes:,} byte limit (bundle_max_bytes)")  # fmt: skip
        for name, n in sizes:
            if n > self.max_file_bytes:
                raise IngestError("file_too_large", f"{name!r} is {n:,} bytes, over the {self.max_file_bytes:,} "
                                  "byte limit (bundle_max_file_bytes)", name)  # fmt: skip


def is_archive(p: Path) -> bool:
    return p.name.lower().endswith(ARCHIVE_SUFFIXES)


def kind_of(folder: Path) -> str | None:
    if (folder / MANIFEST).is_file():
        return "bundle"
    if (folder / "events.jsonl").is_file() and (folder / "metadata.json").is_file():
        return "agentnet"
    return None


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Inputs under the given paths: bundles (folders/archives), AgentNet folders, or landing folders of them."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise ValueError(f"{p} does not exist")
        if p.is_file() or kind_of(p):
            out.append(p)
            continue
        out += sorted(c for c in p.iterdir() if not c.name.startswith("."))
    return out


def check_member(name: str) -> None:
    """Refuse an archive member (or a landed object) whose path is absolute or climbs out with '..'."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise IngestError("archive_absolute_path", f"archive member {name!r} has an absolute path", name)
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        raise IngestError("archive_path_traversal", f"archive member {name!r} escapes the bundle with '..'", name)


def _check_bomb(limits: Limits, sizes: list[tuple[str, int, int]]) -> None:
    """Refuse decompression bombs before extracting: (name, unpacked, packed) too skewed."""
    for name, unpacked, packed in sizes:
        if unpacked > RATIO_FLOOR and unpacked > limits.max_ratio * max(packed, 1):
            raise IngestError("archive_bomb", f"{name!r} unpacks {unpacked / max(packed, 1):,.0f}x its packed size "
                              f"(limit {limits.max_ratio:.0f}x): a decompression bomb", name)  # fmt: skip


def _folder_sizes(folder: Path) -> list[tuple[str, int]]:
    return [(p.relative_to(folder).as_posix(), p.stat().st_size) for p in folder.rglob("*") if p.is_file()]


def open_input(path: Path, workdir: Path, limits: Limits | None = None) -> Path:
    """The input as a folder: archives are checked (paths, links, sizes) before anything is extracted, folders
    against the same size limits (default: the settings)."""
    limits = limits or Limits.from_settings()
    if path.is_dir():
        limits.check_sizes("bundle", _folder_sizes(path))
        return path
    if not is_archive(path):
        raise IngestError("unknown_input", f"{path.name} is neither a bundle folder nor a .zip/.tar.gz archive")
    size = path.stat().st_size
    if size > limits.max_bundle_bytes:
        raise IngestError("archive_too_large", f"archive is {size:,} bytes, over the {limits.max_bundle_bytes:,} "
                          "byte limit (bundle_max_bytes)")  # fmt: skip
    dst = workdir / "x"
    dst.mkdir(parents=True)
    try:
        if path.name.lower().endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                infos = z.infolist()
                for i in infos:
                    check_member(i.filename)
                    if (i.external_attr >> 16) & 0o170000 == 0o120000:
                        raise IngestError(
                            "archive_link", f"archive member {i.filename!r} is a symbolic link", i.filename
                        )
                limits.check_sizes("archive", [(i.filename, i.file_size) for i in infos if not i.is_dir()])
                _check_bomb(limits, [(i.filename, i.file_size, i.compress_size) for i in infos])
                z.extractall(dst)  # noqa: S202 - every member was checked above
        else:
            with tarfile.open(path, "r:gz") as t:
                members = t.getmembers()
                for m in members:
                    check_member(m.name)
                    if not (m.isfile() or m.isdir()):
                        raise IngestError("archive_link", f"archive member {m.name!r} is a link or device", m.name)
                limits.check_sizes("archive", [(m.name, m.size) for m in members if m.isfile()])
                total = sum(m.size for m in members)
                _check_bomb(limits, [(path.name, total, size)])  # one gzip stream: judge the whole archive
                t.extractall(dst, filter="data")
    except (
        zipfile.BadZipFile,
        tarfile.TarError,
        EOFError,
        OSError,
        zlib.error,
        NotImplementedError,
        RuntimeError,
    ) as e:
        # zlib.error: corrupt deflate data; NotImplementedError: an unknown compression method; RuntimeError: encrypted
        raise IngestError("archive_corrupt", f"cannot read the archive: {type(e).__name__}: {str(e)[:200]}") from None
    # an archive may hold the bundle at its root or inside one top folder
    if kind_of(dst) is None:
        subs = [c for c in dst.iterdir() if c.is_dir()]
        if len(subs) == 1 and kind_of(subs[0]):
            return subs[0]
    return dst


def folder_sha256(folder: Path) -> str:
    """Content hash of a bundle: relative paths and bytes of every file (archive or folder give the same)."""
    h = hashlib.sha256()
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        h.update(p.relative_to(folder).as_posix().encode() + b"\0")
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\1")
    return h.hexdigest()
