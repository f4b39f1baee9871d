"""Checkpoints in the object store: a deterministic tar of the save_pretrained folder, content-addressed.

The checkpoint's id (its policy version) is derived from the tar's SHA-256, so the same weights always get the
same id and storing them twice costs nothing. Loading extracts into a local cache keyed by that hash. Rows refer
to a checkpoint by its lake-relative key (objects/ab/<sha256>.tar); an old row's absolute URI of the lake at write
time resolves the same way (storage.objects.object_key_of), so a copied lake loads its checkpoints.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import pyarrow.compute as pc

from storage.objects import object_key_of
from training.model import Policy

CACHE = Path(os.environ.get("FLYWHEEL_CHECKPOINT_CACHE", Path(tempfile.gettempdir()) / "flywheel-checkpoints"))


def version_of(uri: str) -> str:
    """The policy version of a checkpoint URI: 'ckpt-' + the first 12 hex digits of its SHA-256."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    return "ckpt-" + name.split(".", 1)[0][:12]


def checkpoint_key(ref: str) -> str:
    """A checkpoint reference as rows store it (its lake-relative key); a reference that names no object of a lake
    (a model folder) is returned as given."""
    return object_key_of(ref) or ref


def tar_folder(folder: Path) -> bytes:
    """A byte-for-byte reproducible tar: sorted names, zeroed times and owners."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(folder.rglob("*")):
            if not p.is_file():
                continue
            info = tarfile.TarInfo(str(p.relative_to(folder)))
            info.size = p.stat().st_size
            info.mtime = 0
            info.mode = 0o644
            with p.open("rb") as f:
                tf.addfile(info, f)
    return buf.getvalue()


def publish_folder(lake, folder: str | Path) -> str:  # noqa: ANN001
    """Put a save_pretrained folder (ours or an external trainer's) into the object store; return its key."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a model folder (no config.json)")
    return lake.objects.put_object(tar_folder(folder), ".tar")


def publish(lake, policy: Policy, meta: dict | None = None) -> str:  # noqa: ANN001
    with tempfile.TemporaryDirectory(prefix="flywheel-ckpt-") as d:
        policy.save(d, meta)
        return publish_folder(lake, d)


def extract(lake, ref: str) -> Path:  # noqa: ANN001
    """The checkpoint's save_pretrained folder in the local cache (extracted once), whatever model it holds."""
    dest = CACHE / version_of(ref)
    if not (dest / "config.json").is_file():
        data = lake.objects.get_object(ref)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=_mk(CACHE)))
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            tf.extractall(tmp, filter="data")
        try:
            os.replace(tmp, dest)
        except OSError:  # another process extracted it first
            pass
    return dest


def fetch(lake, uri: str) -> Policy:  # noqa: ANN001
    """Load a checkpoint from the object store (extracted once into the local cache)."""
    policy = Policy.load(extract(lake, uri), version=version_of(uri))
    policy.uri = checkpoint_key(uri)
    return policy


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def newest(lake, stage: str | None = None) -> str | None:  # noqa: ANN001
    """The output checkpoint of the most recent training run (of `stage` when given), or None."""
    t = lake.read("training_runs", columns=["stage", "output_checkpoint", "started_at", "round"])
    if stage:
        t = t.filter(pc.equal(t["stage"], stage))
    t = t.filter(pc.is_valid(t["output_checkpoint"]))
    if t.num_rows == 0:
        return None
    t = t.sort_by([("round", "descending"), ("started_at", "descending")])
    return t["output_checkpoint"][0].as_py()
