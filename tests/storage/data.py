"""Small, real episode batches for the storage tests (built with the shared record types)."""

from __future__ import annotations

import pyarrow as pa

from schemas.records import Episode, Step, episodes_to_table


def episodes(n: int, start: int = 0, round: int = 0, session: str = "s1") -> pa.Table:
    """n episodes with distinct content (hence distinct content-hash ids); the same arguments give the same ids."""
    eps = [
        Episode(
            session,
            "rollout",
            f"task-{i}",
            f"open menu {i} — «ünïcode»",
            (
                Step(0, f"click(point='<point>{i % 1900} {i % 1000}</point>')", "the menu is top left"),
                Step(1, "type(content='it\\'s done')", "type it"),
            ),
            round=round,
            env_passed=i % 3 == 0,
        )
        for i in range(start, start + n)
    ]
    return episodes_to_table(eps)


def ids(table: pa.Table) -> list[str]:
    return sorted(table.column("episode_id").to_pylist())
