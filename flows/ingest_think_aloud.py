"""Prefect flow `ingest_think_aloud`: a landing folder or S3 prefix -> sessions, episodes and quarantine rows.

Thin orchestration over ingest.think_aloud: one task per session on the flow's task runner (threads by
default; Dask or Ray through Prefect's integrations), retries on lake I/O, one landing commit at the end (so a
session id that appears twice in one run is caught, and the Delta log gets one commit, not one per session).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from ingest.asr import batch_models
from ingest.think_aloud import IngestOptions, Outcome, land_outcomes, process_input, stage_landing
from storage.lake import Lake


@task(retries=2, retry_delay_seconds=2, task_run_name="session {path.name}")
def ingest_session(path: Path, uri: str, lake: str, round: int, opts: IngestOptions) -> Outcome:
    """Read, transcribe, align and clean one session (never raises on bad input; lake I/O errors retry)."""
    return process_input(path, Lake.open(lake), round, opts, uri=uri)


@task(retries=3, retry_delay_seconds=2)
def land_batch(lake: str, outcomes: list[Outcome], round: int) -> dict:
    return asdict(land_outcomes(Lake.open(lake), outcomes, round))


@flow(name="ingest_think_aloud", task_runner=ThreadPoolTaskRunner(max_workers=2), log_prints=False)
def ingest_think_aloud(landing: str, lake: str | None = None, round: int = 0) -> dict:
    """Ingest every session under `landing` (folder or s3://bucket/prefix) into `lake` (default: settings)."""
    from core.settings import get_settings

    log = get_run_logger()
    lake_uri = lake or get_settings().lake
    Lake.open(lake_uri, create=True)
    opts = IngestOptions.from_settings()
    with tempfile.TemporaryDirectory(prefix="flywheel-landing-") as tmp, batch_models():
        inputs = stage_landing(landing, Path(tmp))
        log.info("ingest_think_aloud: %d input(s) under %s", len(inputs), landing)
        futures = [ingest_session.submit(p, uri, lake_uri, round, opts) for p, uri in inputs]
        outcomes = []
        for i, f in enumerate(futures, 1):
            o = f.result()
            outcomes.append(o)
            state = (
                "quarantined " + o.quarantined[0].error_type
                if o.quarantined
                else ("skipped" if o.timings.get("skipped") else "ok")
            )
            log.info("[%d/%d] %s: %s", i, len(futures), Path(o.uri).name, state)
    res = land_batch(lake_uri, outcomes, round)
    log.info(
        "landed %d episode(s), %d session(s), %d quarantine row(s)",
        res["episodes_added"],
        res["sessions_added"],
        res["quarantined_added"],
    )
    return res
