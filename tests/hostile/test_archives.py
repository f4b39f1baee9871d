"""Archive bombs, nested archives and path traversal are refused before anything big or outside is written, by
ingestion (`process_input`, a quarantine code) and by `flywheel upload`'s check (a problem code)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from flywheel.people.upload import check_bundle
from ingest.think_aloud import IngestOptions, process_input
from tests.hostile import fuzz_targets as ft

GB = 1 << 30


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ft.write_parts(tmp_path_factory.mktemp("good") / "bundle", ft.bundle_parts())


@pytest.fixture(scope="module")
def ta_lake(tmp_path_factory: pytest.TempPathFactory):
    from storage import Lake

    return Lake.open(tmp_path_factory.mktemp("lake") / "lake", create=True)


def _bundle_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def zip_bytes(members: dict[str, bytes], zeros: dict[str, int] | None = None) -> bytes:
    """A zip with the given members, plus members of `n` zero bytes streamed in (a bomb without the memory)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in members.items():
            z.writestr(name, data)
        for name, n in (zeros or {}).items():
            with z.open(name, "w", force_zip64=True) as f:
                chunk = b"\0" * (16 << 20)
                for _ in range(n // len(chunk)):
                    f.write(chunk)
    return buf.getvalue()


def _tar_gz(members: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for ti in members:
            t.addfile(ti, io.BytesIO(data[ti.name]) if ti.isfile() else None)
    return buf.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.size, ti.linkname = kind, size, link
    return ti


def _ingest(lake, path: Path) -> list[str]:
    o = process_input(path, lake, round=0, opts=IngestOptions(salt="t"))
    return [q.error_type for q in o.quarantined]


def _disk_usage(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


@pytest.mark.slow
def test_zip_bomb_is_refused_before_extraction(
    ta_lake, bundle_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 GiB of zeros packed into about 1 MiB, under every size limit: refused by its ratio, nothing extracted."""
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(zip_bytes(_bundle_files(bundle_dir), zeros={"screenshots/huge.png": GB}))
    assert bomb.stat().st_size < 4 << 20
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert _ingest(ta_lake, bomb) == ["archive_bomb"]
    codes = {p.code for p in check_bundle(bomb).problems}
    assert "zip_bomb" in codes, codes
    assert _disk_usage(tmp) < 1 << 20  # nothing big was ever written


@pytest.mark.slow
def test_tar_gz_bomb_and_too_many_members_are_refused(ta_lake, bundle_dir: Path, tmp_path: Path) -> None:
    files = _bundle_files(bundle_dir)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as t:
        for name, data in files.items():
            ti = _info(name, size=len(data))
            t.addfile(ti, io.BytesIO(data))
        ti = _info("screenshots/zeros.png", size=256 << 20)

        class Zeros(io.RawIOBase):
            def __init__(self, n: int) -> None:
                self.left = n

            def readable(self) -> bool:
                return True

            def readinto(self, b) -> int:
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        t.addfile(ti, io.BufferedReader(Zeros(256 << 20)))
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(buf.getvalue())
    assert _ingest(ta_lake, bomb) == ["archive_bomb"]
    assert "archive_bomb" in {p.code for p in check_bundle(bomb).problems}

    many = tmp_path / "many.zip"
    many.write_bytes(zip_bytes({**files, **{f"junk/{i}": b"" for i in range(20_001)}}))
    assert _ingest(ta_lake, many) == ["archive_too_many_files"]


def test_nested_archives_are_not_expanded(ta_lake, bundle_dir: Path, tmp_path: Path) -> None:
    """A bundle whose only content is another archive (or a bomb inside an archive) is a bundle without a manifest."""
    inner = zip_bytes({}, zeros={"zeros.bin": 64 << 20})
    outer = tmp_path / "nested.zip"
    outer.write_bytes(zip_bytes({"inner.zip": inner, "more/inner2.zip": inner}))
    assert _ingest(ta_lake, outer) == ["manifest_missing"]
    assert not check_bundle(outer).ok
    # a valid bundle that carries an archive as a screenshot: the archive is never opened, the image is refused
    files = _bundle_files(bundle_dir) | {"screenshots/0001.png": inner}
    carrier = tmp_path / "carrier.zip"
    carrier.write_bytes(zip_bytes(files))
    assert _ingest(ta_lake, carrier) == ["screenshot_corrupt"]


CASES = {
    "dotdot.zip": ("zip", {"../evil.txt": b"x"}),
    "deep-dotdot.zip": ("zip", {"screenshots/../../evil.txt": b"x"}),
    "absolute.zip": ("zip", {"/tmp/evil.txt": b"x"}),
    "drive.zip": ("zip", {"C:/evil.txt": b"x"}),
    "backslash.zip": ("zip", {"..\\evil.txt": b"x"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_zip_path_traversal_is_refused(ta_lake, bundle_dir: Path, tmp_path: Path, name: str) -> None:
    _, extra = CASES[name]
    p = tmp_path / "in" / name
    p.parent.mkdir()
    p.write_bytes(zip_bytes(_bundle_files(bundle_dir) | extra))
    codes = _ingest(ta_lake, p)
    assert codes and codes[0] in ("archive_path_traversal", "archive_absolute_path"), codes
    assert {pr.code for pr in check_bundle(p).problems} & {"path_traversal"}
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()


def test_links_devices_and_manifest_escapes_are_refused(ta_lake, bundle_dir: Path, tmp_path: Path) -> None:
    files = _bundle_files(bundle_dir)
    for kind, link, code in ((tarfile.SYMTYPE, "/etc/passwd", "archive_link"), (tarfile.LNKTYPE, "/etc/passwd", "archive_link"),
                             (tarfile.CHRTYPE, "", "archive_link"), (tarfile.FIFOTYPE, "", "archive_link")):  # fmt: skip
        members = [_info(n, size=len(d)) for n, d in files.items()] + [_info("screenshots/0002.png", kind, link=link)]
        p = tmp_path / f"t{kind.decode()}.tar.gz"
        p.write_bytes(_tar_gz(members, files))
        assert _ingest(ta_lake, p) == [code], kind
        assert not check_bundle(p).ok
    # a zip member that is a symlink
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        zi = zipfile.ZipInfo("screenshots/link.png")
        zi.external_attr = 0o120777 << 16
        z.writestr(zi, "/etc/passwd")
    p = tmp_path / "symlink.zip"
    p.write_bytes(buf.getvalue())
    assert _ingest(ta_lake, p) == ["archive_link"]
    # a folder bundle whose manifest points outside it, or that holds a symlink to a secret
    for field, value in (("events", "../../../etc/passwd"), ("transcript", "/etc/passwd")):
        parts = ft.bundle_parts()
        parts["manifest"][field] = value
        d = ft.write_parts(tmp_path / f"esc-{field}", parts)
        assert _ingest(ta_lake, d)[0] in ("path_traversal", "manifest_invalid"), field  # schema or path check
    d = tmp_path / "linked"
    shutil.copytree(bundle_dir, d)
    (d / "screenshots" / "0001.png").unlink()
    (d / "screenshots" / "0001.png").symlink_to("/etc/passwd")
    assert "link_in_bundle" in {p.code for p in check_bundle(d).problems}
    codes = _ingest(ta_lake, d)
    assert codes and codes[0] in ("path_traversal", "screenshot_corrupt"), codes  # never read as an image of the bundle
    assert json.loads((bundle_dir / "manifest.json").read_text())["session_id"] == "fuzz-0001"
