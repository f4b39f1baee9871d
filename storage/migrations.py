"""Schema versions of a lake's tables: check them on open, migrate older ones, refuse newer ones."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.tables import TABLES
from storage.errors import LakeError

if TYPE_CHECKING:
    from storage.lake import Lake

#: (table, from_version) -> function(lake) that brings the table to from_version + 1. None yet: every table is v1.
MIGRATIONS: dict[tuple[str, int], Any] = {}


def check_versions(lake: Lake, manifest: dict[str, Any]) -> dict[str, Any]:
    """Raise LakeError for tables written by a newer schema version; migrate older ones in place."""
    from storage.lake import LAKE_FORMAT

    if manifest.get("format", 1) > LAKE_FORMAT:
        raise LakeError(
            f"{lake.uri} was written by a newer flywheel (lake format {manifest['format']} > {LAKE_FORMAT}); upgrade flywheel"
        )
    tables = manifest.get("tables", {})
    for name, v in tables.items():
        if name in TABLES and v > TABLES[name].version:
            raise LakeError(
                f"table {name!r} in {lake.uri} has schema version {v}, newer than this flywheel's "
                f"{TABLES[name].version}; upgrade flywheel (pip install -U flywheel)"
            )
    return manifest
