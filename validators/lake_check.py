"""`flywheel check` over a whole flywheel lake: storage's invariants plus the key indexes that validators keep there
(the piles' exact-dedup content keys), which storage cannot know of without importing upwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from storage.check import CheckReport
from storage.check import check_lake as check_storage
from storage.piles import PILES
from validators.dedup import ExactDedup


def check_lake(lake: Any, *, media: bool = True, progress: Callable[[str], None] | None = None) -> CheckReport:
    dedup = ExactDedup().pile_index(lake)
    return check_storage(lake, media=media, progress=progress, indexes=[(p, dedup) for p in PILES])
