"""Pinned table versions: Delta versions that something outside the table refers to and that vacuum must keep.

An export records the version of the pile it read (flywheel_export.json), an audit sheet the version of the SFT
pile it was drawn from (sample.json), a training run the pile version it trained on (training_runs.pile_version).
Those files live outside the lake, so the lake keeps its own registry: one small object per pin,
`pins/<table>/v<version>-<id>.json`. One object per pin (not one list per table) means two exports running at the
same moment never overwrite each other's pin; pinning the same thing twice writes the same object.
`flywheel maintain` passes the pinned versions to Delta's vacuum (`keep_versions`), so their files survive.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from schemas.tables import spec
from storage.lake import Lake, content_id

PINS = "pins"


@dataclass(frozen=True)
class Pin:
    table: str
    version: int
    reason: str  # e.g. "export sft-trl", "audit sample round 3 seed 7"
    ref: str  # what refers to it: an export folder, an audit folder, a training run id
    pinned_at: str


def pin_version(lake: Lake, table: str, version: int, reason: str, ref: str = "") -> Pin:
    """Record that `table` at `version` is referenced from outside the lake (idempotent per (reason, ref))."""
    spec(table)
    if version < 0:
        raise ValueError(f"cannot pin version {version} of {table}")
    pin = Pin(table, int(version), reason, ref, datetime.now(UTC).isoformat(timespec="seconds"))
    rel = f"{PINS}/{table}/v{version}-{content_id(table, str(version), reason, ref)[:16]}.json"
    if not lake.objects.exists(rel):
        lake.objects.put_text(rel, json.dumps(asdict(pin), sort_keys=True))
    return pin


def list_pins(lake: Lake) -> list[Pin]:
    """Every pin in the registry (unreadable pin objects are skipped: a pin is a hint, never a reason to fail)."""
    out = []
    for rel in lake.objects.list(PINS + "/"):
        if not rel.endswith(".json"):
            continue
        try:
            d = json.loads(lake.objects.get_text(rel) or "")
            out.append(
                Pin(
                    str(d["table"]),
                    int(d["version"]),
                    str(d.get("reason", "")),
                    str(d.get("ref", "")),
                    str(d.get("pinned_at", "")),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out


def pinned_versions(lake: Lake, *, training_runs: bool = True) -> dict[str, set[int]]:
    """table -> versions to keep: the registry, plus the pile versions recorded in training_runs."""
    out: dict[str, set[int]] = {}
    for p in list_pins(lake):
        out.setdefault(p.table, set()).add(p.version)
    if training_runs and lake.count("training_runs"):
        t = lake.read("training_runs", ["stage", "pile_version"]).to_pylist()
        for r in t:
            if r["pile_version"] is not None:
                out.setdefault("ct" if r["stage"] == "ct" else "sft", set()).add(int(r["pile_version"]))
    return out
