"""`flywheel check` and `flywheel repair` over a whole flywheel lake: storage's invariants and repairs plus the key
indexes that validators keep there (the piles' exact-dedup content keys), which storage cannot know of without
importing upwards."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from storage.check import CheckReport
from storage.check import check_lake as check_storage
from storage.piles import PILES
from storage.repair import RepairReport
from storage.repair import repair_lake as repair_storage
from validators.dedup import ExactDedup


def _indexes(lake: Any) -> list[tuple[str, Any]]:
    dedup = ExactDedup().pile_index(lake)
    return [(p, dedup) for p in PILES]


def check_lake(lake: Any, *, media: bool = True, progress: Callable[[str], None] | None = None) -> CheckReport:
    return check_storage(lake, media=media, progress=progress, indexes=_indexes(lake))


def repair_lake(lake: Any, tables: Sequence[str] | None = None) -> RepairReport:
    """storage.repair over the whole flywheel lake: the piles' dedup indexes are rebuilt too."""
    return repair_storage(lake, tables, indexes=_indexes(lake))
