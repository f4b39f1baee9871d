"""`flywheel maintain`: compact small files, vacuum old versions, keep what exports, audits and training refer to.

Why: every append is one Delta commit with its own Parquet file(s), so a lake that grows by many small batches
(one rollout block, one session, one rounds upsert at a time) ends up with thousands of small files and a long log;
scans and log replay slow down. Compaction (deltalake `optimize.compact`) rewrites small files into few large ones
in one commit that changes no row (the key-index sidecars of the files it replaced are deleted with the vacuum);
vacuum deletes files that no version within the retention window still needs,
and files that no commit ever added (left by a crashed write).

What is kept: every version younger than `retain_hours` (Delta's time travel window), and every pinned version
(storage/pins.py: exports, audit samples, training runs' pile versions), whose files are passed to vacuum as
`keep_versions`. For tables with pins the Delta log retention is raised too (`delta.logRetentionDuration`), so a
pinned version stays loadable, not only its data files.

Safe to run while others append: compaction only removes files it rewrote (appends never conflict with it), a
lost commit race is retried, and vacuum never deletes a file younger than the retention window, so a write in
flight keeps its not-yet-committed files unless retain_hours is 0 (for tests and empty machines only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from deltalake.exceptions import CommitFailedError

from schemas.tables import TABLES
from storage.delta import delta_errors
from storage.errors import LakeError
from storage.lake import Lake

#: Delta's own default retention (one week).
DEFAULT_RETAIN_HOURS = 168.0
#: Target size of compacted files.
DEFAULT_TARGET_BYTES = 128 << 20
#: Log retention set on tables with pinned versions (Delta's default is 30 days).
PINNED_LOG_RETENTION = "interval 3650 days"
_COMPACT_ATTEMPTS = 5


@dataclass
class TableMaintenance:
    table: str
    version_before: int
    version_after: int
    files_before: int
    files_after: int
    files_compacted: int = 0  # small files rewritten
    files_written: int = 0  # files the compaction wrote
    files_vacuumed: int = 0  # files deleted (or, on a dry run, that would be)
    index_files_removed: int = 0  # key-index sidecars of files no longer in the table (storage/keyindex.py)
    kept_versions: list[int] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""


@dataclass
class MaintainReport:
    lake: str
    retain_hours: float
    dry_run: bool
    tables: list[TableMaintenance] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"lake": self.lake, "retain_hours": self.retain_hours, "dry_run": self.dry_run,
                "tables": [t.__dict__ for t in self.tables]}  # fmt: skip


def _n_files(lake: Lake, name: str) -> int:
    return len(lake.delta(name).file_uris())


def compact_table(lake: Lake, name: str, target_bytes: int = DEFAULT_TARGET_BYTES) -> tuple[int, int]:
    """Rewrite the table's small files into few large ones (one commit, same rows); (files removed, added)."""
    for i in range(_COMPACT_ATTEMPTS):
        dt = lake.delta(name)
        if len(dt.file_uris()) < 2:
            return 0, 0
        try:
            with delta_errors(f"compacting {name}"):
                m = dt.optimize.compact(target_size=target_bytes)
            return int(m.get("numFilesRemoved", 0)), int(m.get("numFilesAdded", 0))
        except CommitFailedError:  # a concurrent merge/compaction removed one of our files: redo on the new snapshot
            time.sleep(0.2 * (i + 1))
    raise LakeError(
        f"table {name}: compaction lost {_COMPACT_ATTEMPTS} commit races with concurrent writers; run maintain again"
    )


def _set_properties(lake: Lake, name: str, props: dict[str, str], what: str) -> bool:
    """Set table properties the table does not have yet (one metadata commit, retried on a lost race); True when
    it changed them."""
    conf = lake.delta(name).metadata().configuration
    if all(conf.get(k) == v for k, v in props.items()):
        return False
    for _ in range(_COMPACT_ATTEMPTS):
        try:
            with delta_errors(f"setting the {what} of {name}"):
                lake.delta(name).alter.set_table_properties(props)
            return True
        except CommitFailedError:
            time.sleep(0.2)
    return False


def set_checkpoint_interval(lake: Lake, name: str) -> bool:
    """Give a table made before flywheel set `delta.checkpointInterval` the lake's interval."""
    from storage.lake import TABLE_CONFIGURATION

    return _set_properties(lake, name, TABLE_CONFIGURATION, "checkpoint interval")


def protect_log(lake: Lake, name: str) -> bool:
    """Keep the table's log long enough for its pinned versions to stay loadable; True when it changed it."""
    return _set_properties(lake, name, {"delta.logRetentionDuration": PINNED_LOG_RETENTION}, "log retention")


def vacuum_table(
    lake: Lake, name: str, retain_hours: float, keep: Iterable[int], dry_run: bool = False
) -> tuple[int, list[int]]:
    """Delete files no kept version needs (and files no commit added) older than retain_hours; (count, kept)."""
    dt = lake.delta(name)
    latest = dt.version()
    kept = sorted(v for v in set(keep) if 0 <= v <= latest)
    with delta_errors(f"vacuuming {name}"):
        gone = dt.vacuum(
            retention_hours=int(retain_hours),
            dry_run=dry_run,
            enforce_retention_duration=False,
            full=True,
            keep_versions=kept or None,
        )
    return len(gone), kept


def drop_stale_index_files(lake: Lake, name: str, dry_run: bool = False) -> int:
    """Delete the key-index sidecars of data files the table's latest version no longer has (compacted away).
    Appends only use the latest version's sidecars, and one deleted under a racing append is rebuilt by it."""
    from storage.keyindex import stale_sidecars

    gone = stale_sidecars(lake, name, lake.delta(name))
    if not dry_run:
        for rel in gone:
            lake.objects.delete(rel)
    return len(gone)


def refuse_if_damaged(lake: Lake, names: list[str]) -> None:
    """LakeError while a table has an emptied or torn commit, or a missing or unreadable data file (storage/health):
    vacuum would delete the files of a commit the log lost (the only copy of its rows until they are re-ingested)
    and compaction would rewrite a snapshot that cannot be read."""
    from storage.health import damage, repair_command

    found = damage(lake, names)
    if found:
        d = found[0]
        raise LakeError(
            f"refusing to maintain {lake.uri}: {len(found)} problem(s) that vacuum could make permanent, e.g. "
            f"{d.code} [{d.table}] {d.item}; run `{repair_command(lake)}`, re-ingest, then `flywheel check`"
        )


def maintain(
    lake: Lake,
    *,
    retain_hours: float = DEFAULT_RETAIN_HOURS,
    tables: Iterable[str] | None = None,
    compact: bool = True,
    vacuum: bool = True,
    dry_run: bool = False,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    progress: Callable[[str], None] | None = None,
) -> MaintainReport:
    """Compact and vacuum every table (or `tables`); pinned versions keep their files and their log."""
    from storage.pins import pinned_versions

    if retain_hours < 0:
        raise ValueError(f"--retain-hours must be >= 0, got {retain_hours}")
    if not float(retain_hours).is_integer():
        raise ValueError(f"--retain-hours must be a whole number of hours, got {retain_hours}")
    names = list(TABLES if tables is None else tables)
    unknown = [n for n in names if n not in TABLES]
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    if not dry_run:
        refuse_if_damaged(lake, names)
    say = progress or (lambda what: None)
    pins = pinned_versions(lake)
    report = MaintainReport(str(lake.uri), retain_hours, dry_run)
    for name in names:
        say(name)
        t0 = time.perf_counter()
        v0, f0 = lake.version(name), _n_files(lake, name)
        tm = TableMaintenance(name, v0, v0, f0, f0)
        notes = []
        if pins.get(name) and not dry_run and protect_log(lake, name):
            notes.append("log retention raised for pinned versions")
        if not dry_run and set_checkpoint_interval(lake, name):
            notes.append("checkpoint interval set")
        tm.note = "; ".join(notes)
        if compact and not dry_run:
            tm.files_compacted, tm.files_written = compact_table(lake, name, target_bytes)
        if vacuum:
            tm.files_vacuumed, tm.kept_versions = vacuum_table(lake, name, retain_hours, pins.get(name, ()), dry_run)
            tm.index_files_removed = drop_stale_index_files(lake, name, dry_run)
        tm.version_after, tm.files_after = lake.version(name), _n_files(lake, name)
        tm.seconds = round(time.perf_counter() - t0, 3)
        report.tables.append(tm)
    return report
