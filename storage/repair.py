"""`flywheel repair`: bring a damaged table back to a consistent snapshot (storage/health.py finds the damage), so
that re-ingesting the sources restores what was lost.

- An empty or torn commit file (a power cut while committing) is kept aside under `_delta_log_damaged/` and
  replaced by a commit with no actions, so the log stays gap-free and every command can open the table again;
  the rows that commit would have added are not in the table (they were not before, either).
- A data file that is missing, or is not Parquet (kept aside under `_damaged/`), is removed from the snapshot in
  one Delta commit (delta-rs's FSCK, `DeltaTable.repair`).
- The key indexes are rebuilt from the repaired snapshot: sidecars and merged segments that cover a file no longer
  in it, or that disagree with their file, are deleted and built again from the data. An index that listed the
  lost rows would make a re-ingest skip them as already present.

Repairing twice changes nothing the second time; re-ingesting the sources then adds exactly the lost rows (every
append is keyed)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.tables import TABLES
from storage.delta import delta_errors, forget_snapshots
from storage.errors import LakeError
from storage.health import Damage, commit_damage, file_damage
from storage.lake import Lake


@dataclass
class RepairReport:
    lake: str
    done: list[str] = field(default_factory=list)  # one line per action taken
    found: list[Damage] = field(default_factory=list)


def _replace_commit(lake: Lake, d: Damage) -> str:
    version = int(d.item[:20])
    if version == 0:
        raise LakeError(
            f"table {d.table}: its first commit ({d.item}) is {d.code.removeprefix('commit_')}, so its schema is lost; "
            f"move tables/{d.table} aside and run `flywheel init --lake {lake.uri}`, then re-ingest"
        )
    rel = f"tables/{d.table}/_delta_log/{d.item}"
    lake.objects.put_bytes(f"tables/{d.table}/_delta_log_damaged/{d.item}", lake.objects.get_bytes(rel) or b"")
    info = {"timestamp": int(time.time() * 1000), "operation": "FLYWHEEL REPAIR",
            "operationParameters": {"replaced": d.code, "note": "rows of this commit were lost; re-ingest them"}}  # fmt: skip
    lake.objects.put_bytes(rel, (json.dumps({"commitInfo": info}) + "\n").encode())
    return f"{d.table}: {d.detail}; replaced by an empty commit (original in _delta_log_damaged/{d.item})"


def _drop_files(lake: Lake, table: str, bad: list[Damage]) -> list[str]:
    out = []
    for d in bad:
        if d.code == "data_file_unreadable":  # keep it aside; FSCK then sees it as missing
            rel = f"tables/{table}/{d.item}"
            lake.objects.put_bytes(f"tables/{table}/_damaged/{d.item}", lake.objects.get_bytes(rel) or b"")
            lake.objects.delete(rel)
    with delta_errors(f"repairing {table}"):
        res = lake.delta(table).repair()
    removed = res.get("files_removed", []) if isinstance(res, dict) else []
    out.append(
        f"{table}: removed {len(removed)} missing or unreadable data file(s) from the snapshot: " + ", ".join(removed)
    )
    return out


def rebuild_key_indexes(lake: Lake, table: str, indexes: Sequence[Any]) -> int:
    """Delete the table's key-index sidecars and segments that cover files outside the snapshot or disagree with
    their files, then build every missing one from the data; returns how many were deleted."""
    from storage import keyindex

    dt = lake.delta(table)
    gone = set(keyindex.stale_sidecars(lake, table, dt))
    for index in indexes:
        for bad in keyindex.verify(lake, table, index, dt):
            if bad.startswith("segment "):
                gone |= set(lake.objects.list(f"{keyindex.INDEX_ROOT}/{table}/{index.folder}/{keyindex.SEGMENTS}/"))
            else:
                gone.add(keyindex.sidecar_rel(table, index, bad))
    for rel in gone:
        lake.objects.delete(rel)
    keyindex.forget()
    for index in indexes:
        keyindex.runs(lake, table, index, dt)  # builds and stores every missing run
    return len(gone)


def repair_lake(
    lake: Lake, tables: Sequence[str] | None = None, *, indexes: Sequence[tuple[str, Any]] = ()
) -> RepairReport:
    """Repair every table (or `tables`); `indexes`: (table, FileIndex) of every key index kept in the lake
    (`validators.lake_check.repair_lake` passes the piles' dedup indexes too)."""
    from storage.check import key_indexes

    names = list(tables or TABLES)
    unknown = [n for n in names if n not in TABLES]
    if unknown:
        raise LakeError(f"unknown table(s) {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    report = RepairReport(str(lake.uri))
    all_indexes = key_indexes(lake, indexes)
    for name in names:
        commits = commit_damage(lake, name)
        report.found += commits
        for d in commits:
            report.done.append(_replace_commit(lake, d))
        forget_snapshots()
        files = file_damage(lake, name)
        report.found += files
        if any(d.code == "table_unreadable" for d in files):
            raise LakeError(f"table {name} cannot be opened after repair: {files[0].item}")
        if files:
            report.done += _drop_files(lake, name, files)
            forget_snapshots()
        own = [ix for t, ix in all_indexes if t == name]
        if own:
            n = rebuild_key_indexes(lake, name, own)
            if n or commits or files:
                report.done.append(f"{name}: key index rebuilt from the snapshot ({n} sidecar(s) replaced)")
    return report
