"""Fan-out beyond one machine: think-aloud ingestion on a Dask cluster of 2 worker processes, lake on S3."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.ingest_think_aloud.scripted import build

pytestmark = [pytest.mark.slow]


def test_think_aloud_fans_out_on_a_local_dask_cluster_with_an_s3_lake(prefect_harness, s3_lake, tmp_path: Path) -> None:
    from distributed import Client, LocalCluster, get_task_stream
    from prefect_dask import DaskTaskRunner

    from flows.ingest_think_aloud import ingest_think_aloud

    landing = tmp_path / "landing"
    landing.mkdir()
    build(landing / "spoken", session_id="ta-dask-spoken", speech=True)  # real speech -> ASR on a worker
    for i in range(3):
        build(landing / f"text-{i}", session_id=f"ta-dask-text-{i}", speech=False)
    # the workers are separate processes: they read the S3 settings from the environment they inherit
    assert os.environ["FLYWHEEL_S3_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    with (
        LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        flow = ingest_think_aloud.with_options(task_runner=DaskTaskRunner(address=cluster.scheduler_address))
        with get_task_stream(client) as stream:
            res = flow(str(landing), str(s3_lake.uri), round=2)
        workers = {t["worker"] for t in stream.data}
        again = flow(str(landing), str(s3_lake.uri), round=2)
    assert len(workers) == 2, workers  # the sessions ran in both worker processes
    assert (res["episodes_added"], res["sessions_added"], res["quarantined_added"]) == (4, 4, 0)
    eps = {e["session_id"]: e for e in s3_lake.read("episodes").to_pylist()}
    assert set(eps) == {"ta-dask-spoken", "ta-dask-text-0", "ta-dask-text-1", "ta-dask-text-2"}
    spoken = eps["ta-dask-spoken"]
    assert spoken["round"] == 2 and sum(1 for s in spoken["steps"] if s["thought"]) >= 6  # ASR ran and aligned
    assert (again["episodes_added"], again["sessions_added"]) == (0, 0)
