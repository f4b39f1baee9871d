"""Prefect flows `ingest_annotations` and `ingest_rollouts`: annotation session files and rollout files -> lake.

Thin orchestration over ingest.annotations and ingest.rollouts. One task per file, run one after another:
a rollout file already streams in blocks and keeps both cores busy, and a session file is small. Tasks retry on
lake I/O; retrying is safe because every write is idempotent (episode, pair, quarantine and session ids are
content hashes).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import flow, get_run_logger, task

from ingest.annotations import land_session, read_session, session_files
from ingest.rollouts import ingest_rollout_file
from storage.lake import Lake


@task(retries=3, retry_delay_seconds=2, task_run_name="session {path.name}")
def ingest_session_file(path: Path, lake: str, round: int) -> dict:
    s = read_session(path, round=round)
    res, pairs = land_session(Lake.open(lake), s)
    return {
        **asdict(res),
        "pairs_added": pairs,
        "override_rate": s.session.get("override_rate"),
        "problems": s.session["problems"],
    }


@flow(name="ingest_annotations", log_prints=False)
def ingest_annotations(paths: list[str], lake: str | None = None, round: int = 0) -> dict:
    """Ingest interactive-annotation session files (or folders of *.json) into `lake` (default: settings)."""
    from core.settings import get_settings

    log = get_run_logger()
    lake_uri = lake or get_settings().lake
    Lake.open(lake_uri, create=True)
    files = session_files(list(paths))
    log.info("ingest_annotations: %d session file(s)", len(files))
    total: dict = {
        "files": len(files),
        "episodes_added": 0,
        "sessions_added": 0,
        "quarantined_added": 0,
        "pairs_added": 0,
    }
    for i, f in enumerate(files, 1):
        r = ingest_session_file(f, lake_uri, round)
        for k in ("episodes_added", "sessions_added", "quarantined_added", "pairs_added"):
            total[k] += r[k]
        rate = "-" if r["override_rate"] is None else f"{r['override_rate']:.0%}"
        log.info(
            "[%d/%d] %s: %d episode(s) added, override rate %s%s",
            i,
            len(files),
            f.name,
            r["episodes_added"],
            rate,
            f", problems: {', '.join(r['problems'])}" if r["problems"] else "",
        )
    log.info(
        "landed %d episode(s), %d pair(s), %d quarantine row(s)",
        total["episodes_added"],
        total["pairs_added"],
        total["quarantined_added"],
    )
    return total


@task(retries=3, retry_delay_seconds=5, task_run_name="rollouts {path.name}")
def ingest_rollout_task(path: Path, lake: str, round: int, block_mb: int) -> dict:
    log = get_run_logger()
    step = {"next": 0.0}

    def progress(done: int, total: int, added: int) -> None:
        if total and done / total >= step["next"]:  # about every 10%
            log.info("%s: %.0f%% (%d episode(s) added)", path.name, 100 * done / total, added)
            step["next"] = done / total + 0.1

    r = ingest_rollout_file(Lake.open(lake), path, round=round, block_bytes=block_mb << 20, progress=progress)
    return {
        **asdict(r.result),
        "n_steps": r.n_steps,
        "quarantine_codes": r.quarantine_codes,
        "session_id": r.session_id,
    }


@flow(name="ingest_rollouts", log_prints=False)
def ingest_rollouts(files: list[str], lake: str | None = None, round: int = 0, block_mb: int = 64) -> dict:
    """Stream rollout files (.jsonl or .parquet) into `lake` (default: settings), idempotently."""
    from core.settings import get_settings

    log = get_run_logger()
    lake_uri = lake or get_settings().lake
    Lake.open(lake_uri, create=True)
    total: dict = {"files": len(files), "episodes_added": 0, "episodes_seen": 0, "quarantined_added": 0, "n_steps": 0}
    for i, f in enumerate(map(Path, files), 1):
        if not f.is_file():
            raise FileNotFoundError(f"{f}: no such file")
        r = ingest_rollout_task(f, lake_uri, round, block_mb)
        for k in ("episodes_added", "episodes_seen", "quarantined_added", "n_steps"):
            total[k] += r[k]
        log.info(
            "[%d/%d] %s: %d attempt(s) read, %d added, quarantined %s",
            i,
            len(files),
            f.name,
            r["episodes_seen"],
            r["episodes_added"],
            r["quarantine_codes"] or "none",
        )
    return total
