"""One set of bundle size limits (core settings bundle_max_*), shared by `flywheel upload`'s checks and ingestion,
for folders and archives alike: whatever upload accepts, ingestion accepts, and a folder over the limit is refused
by ingestion as an archive is."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import reset_settings_cache
from flywheel.people.upload import check_bundle
from ingest.think_aloud import IngestOptions, ingest_paths
from tests.hostile.fuzz_targets import PARTS, write_parts, zip_folder

PAD = 300_000  # a bundle with this padding file is over the limit below, one without is under it


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FLYWHEEL_BUNDLE_MAX_BYTES", "200000")
    monkeypatch.setenv("FLYWHEEL_BUNDLE_MAX_FILE_BYTES", "150000")
    reset_settings_cache()
    yield
    reset_settings_cache()


def _inputs(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, pad in (("ok", 0), ("big", PAD)):
        raw = {"pad.bin": bytes(range(256)) * (pad // 256)} if pad else None
        sid = {**PARTS, "manifest": {**PARTS["manifest"], "session_id": f"lim-{name}"}}
        folder = write_parts(tmp_path / name / "folder", sid, raw)
        z = tmp_path / name / "bundle.zip"
        z.write_bytes(zip_folder(folder))
        out[f"{name}-folder"], out[f"{name}-zip"] = folder, z
    return out


def test_upload_and_ingestion_agree(lake, tmp_path: Path, small_limits) -> None:
    inputs = _inputs(tmp_path)
    for name, p in inputs.items():
        c = check_bundle(p)
        res = ingest_paths(lake, [p], opts=IngestOptions(salt="t"))
        q = lake.read("quarantine", ["landed_uri", "error_type"]).to_pylist()
        codes = [r["error_type"] for r in q if r["landed_uri"] == str(p.resolve())]
        if name.startswith("ok"):
            assert c.ok and res.quarantined_added == 0 and not codes, (name, c.problems, codes)
        else:  # refused by both, the folder too (ingestion had no folder limit)
            assert not c.ok and codes and codes[0].endswith(("too_large", "file_too_large")), (name, c.problems, codes)
    assert lake.count("episodes") == 1  # the ok folder and the ok zip are one session (same content)


def test_the_limits_are_settings(small_limits) -> None:
    from ingest.archives import Limits

    lim = Limits.from_settings()
    assert (lim.max_bundle_bytes, lim.max_file_bytes) == (200_000, 150_000)
    assert Limits.from_settings(max_files=3).max_files == 3
