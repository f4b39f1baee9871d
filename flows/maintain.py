"""Prefect flow `maintain`: compact and vacuum the lake, then check its invariants (schedule it from prefect.yaml).

Thin tasks over storage.maintain and storage.check. Maintenance is retried on I/O errors (compaction and vacuum
are idempotent); the check is not retried: a violation is a finding, reported in the flow's result and log.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task

from storage.lake import Lake


@task(retries=2, retry_delay_seconds=10)
def maintain_task(lake: str, retain_hours: int, compact: bool, vacuum: bool) -> dict[str, Any]:
    from storage.maintain import maintain

    return maintain(Lake.open(lake), retain_hours=retain_hours, compact=compact, vacuum=vacuum).as_dict()


@task
def check_task(lake: str, media: bool) -> dict[str, Any]:
    from validators.lake_check import check_lake

    return check_lake(Lake.open(lake), media=media).as_dict()


@flow(name="maintain")
def maintain_flow(lake: str | None = None, retain_hours: int = 168, compact: bool = True, vacuum: bool = True,
                  check: bool = True, media: bool = True) -> dict[str, Any]:  # fmt: skip
    """Compact + vacuum every table of `lake` (default: settings), then run `flywheel check`'s invariants."""
    from core.settings import get_settings

    log = get_run_logger()
    lake_uri = lake or get_settings().lake
    rep = maintain_task(lake_uri, retain_hours, compact, vacuum)
    for t in rep["tables"]:
        if t["files_compacted"] or t["files_vacuumed"]:
            log.info("%s: %d -> %d file(s), %d vacuumed, kept versions %s", t["table"], t["files_before"], t["files_after"],
                     t["files_vacuumed"], t["kept_versions"] or "-")  # fmt: skip
    out: dict[str, Any] = {"maintain": rep}
    if check:
        chk = check_task(lake_uri, media)
        for v in chk["violations"]:
            log.error("violated: %s [%s]: %d %s", v["invariant"], v["table"], v["count"], v["message"])
        out["check"] = chk
    return out
