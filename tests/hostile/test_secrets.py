"""Credentials never appear in output, errors, reprs, Prefect logs or artifacts: commands and flows run against an
S3 lake with a distinctive secret key, and every place the secret could leak to is searched for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.s3 import free_port
from tests.ingest_records.helpers import attempt, write_lines

SECRET = "Zq9-VERY-distinctive-secret-7Hk2"
KEY_ID = "AKIA-distinctive-keyid-4Wd"


@pytest.fixture
def secret_env(moto_server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from core.settings import reset_settings_cache

    env = {**moto_server.env(), "FLYWHEEL_S3_SECRET_ACCESS_KEY": SECRET, "FLYWHEEL_S3_ACCESS_KEY_ID": KEY_ID,
           "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ACCESS_KEY_ID": KEY_ID, "FLYWHEEL_S3_MAX_ATTEMPTS": "1",
           "FLYWHEEL_S3_CONNECT_TIMEOUT_S": "1", "FLYWHEEL_S3_READ_TIMEOUT_S": "2"}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    reset_settings_cache()
    return env


def _clean(text: str, where: str) -> None:
    for s in (SECRET, KEY_ID):
        assert s not in text, (
            f"{s[:6]}... leaked in {where}: ...{text[max(text.find(s) - 200, 0) : text.find(s) + 50]}..."
        )


def _run(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "flywheel", *args], capture_output=True, text=True, input=stdin,
                       env={**os.environ, **env, "COLUMNS": "200"}, timeout=180)  # fmt: skip
    _clean(r.stdout + r.stderr, f"flywheel {' '.join(args)}")
    return r


@pytest.mark.slow
def test_commands_never_print_credentials(moto_server, secret_env: dict[str, str], tmp_path: Path) -> None:
    lake = f"s3://{moto_server.new_bucket()}/lake"
    f = write_lines(
        tmp_path / "r.jsonl", [attempt(i, screen_width=100, screen_height=80) for i in range(20)] + ["{not json"]
    )
    ok = [
        ("init", "--lake", lake), ("config",), ("tables", "--lake", lake),
        ("ingest", "rollouts", str(f), "--lake", lake, "--round", "1"), ("route", "--round", "1", "--lake", lake),
        ("sql", "SELECT * FROM duckdb_settings()", "--lake", lake, "--format", "json"),
        ("check", "--lake", lake, "--json"), ("maintain", "--lake", lake, "--retain-hours", "0"),
        ("export", "ct-text", "--out", str(tmp_path / "exp"), "--lake", lake),
    ]  # fmt: skip
    for args in ok:
        r = _run(secret_env, *args)
        assert r.returncode == 0, (args, r.stderr[-1500:])
    assert "***" in _run(secret_env, "config").stdout
    _clean((tmp_path / "exp" / "flywheel_export.json").read_text(), "the export sidecar")
    dead = {**secret_env, "FLYWHEEL_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    for args in (("--debug", "check", "--lake", lake), ("tables", "--lake", "s3://no-such-bucket-x/lake"),
                 ("ingest", "rollouts", str(f), "--lake", lake)):  # fmt: skip
        r = _run(dead if "no-such" not in args[-1] else secret_env, *args)
        assert r.returncode != 0, args


def test_errors_and_reprs_never_hold_credentials(moto_server, secret_env: dict[str, str]) -> None:
    from core.settings import get_settings, reset_settings_cache
    from storage import Lake
    from storage.errors import LakeError

    lake = Lake.open(f"s3://{moto_server.new_bucket()}/lake", create=True)
    _clean(
        repr(lake)
        + str(lake.uri)
        + repr(lake.uri)
        + repr(get_settings())
        + str(get_settings())
        + json.dumps(get_settings().masked()),
        "reprs",
    )
    os.environ["FLYWHEEL_S3_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    reset_settings_cache()
    for fn in (lambda: Lake.open(str(lake.uri)), lambda: Lake.open("s3://no-such-bucket-y/lake")):
        with pytest.raises(LakeError) as e:
            fn()
        _clean(
            str(e.value) + repr(e.value) + "".join(__import__("traceback").format_exception(e.value)), "an exception"
        )


def _prefect_record(artifact_key: str | None = None) -> tuple[str, list]:
    """Everything the Prefect API holds (logs, artifacts, flow and task runs with their parameters and states), as
    one text; and the artifacts with `artifact_key`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    def every(read) -> list:
        out: list = []
        while True:
            page = read(limit=200, offset=len(out))
            out += page
            if len(page) < 200:
                return out

    with get_client(sync_client=True) as client:
        parts = [log.message for log in every(client.read_logs)]
        for read in (client.read_artifacts, client.read_flow_runs, client.read_task_runs):
            parts += [json.dumps(x.model_dump(mode="json"), default=str) for x in every(read)]
        keyed = (
            client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key])))
            if artifact_key
            else []
        )
    return "\n".join(parts), keyed


@pytest.mark.slow
def test_prefect_logs_and_artifacts_never_hold_credentials(
    moto_server, secret_env: dict[str, str], tmp_path: Path, prefect_harness
) -> None:
    from core.settings import reset_settings_cache
    from flows.ingest_records import ingest_rollouts
    from flows.maintain import maintain_flow

    lake = f"s3://{moto_server.new_bucket()}/lake"
    f = write_lines(
        tmp_path / "r.jsonl", [attempt(i, screen_width=100, screen_height=80) for i in range(10)] + ["[1, 2]"]
    )
    ingest_rollouts([str(f)], lake=lake, round=1)
    maintain_flow(lake, retain_hours=0)
    os.environ["FLYWHEEL_S3_ENDPOINT_URL"] = (
        f"http://127.0.0.1:{free_port()}"  # the endpoint dies: flows fail and log why
    )
    reset_settings_cache()
    for flow in (lambda: ingest_rollouts([str(f)], lake=lake, round=1), lambda: maintain_flow(lake)):
        with pytest.raises(Exception) as e:
            flow()
        _clean(str(e.value) + "".join(__import__("traceback").format_exception(e.value)), "a flow's exception")
    record, _ = _prefect_record()
    assert lake.split("/")[2] in record  # the runs of this lake are there (their parameters name its bucket)
    _clean(record, "Prefect logs, artifacts, flow runs (parameters, states) and task runs")
    assert "Traceback" in record or "failed" in record.lower()  # the failures were logged


@pytest.mark.slow
def test_a_round_on_s3_never_puts_credentials_in_its_artifact_runs_or_dashboard(
    moto_server, secret_env: dict[str, str], tmp_path: Path, prefect_harness
) -> None:
    """A whole round (ingest, route, SFT, sampling, evaluation, summary artifact, dashboard) on an S3 lake, then a
    round that fails because the endpoint died: the secret is in neither the round's artifact nor anything else
    Prefect holds, nor the dashboard page."""
    from core.settings import reset_settings_cache
    from flows.config import load_round_config
    from flows.round import flywheel_round
    from storage import Lake
    from tests.rounds.helpers import write_config, write_landing

    lake = f"s3://{moto_server.new_bucket()}/lake"
    landing = write_landing(Lake.open(lake, create=True), tmp_path / "landing", n_expert=8, n_novice=4, n_inter=1)
    cfg = load_round_config(write_config(tmp_path / "round.json"))
    dash = tmp_path / "dash.html"
    out = flywheel_round(lake=lake, landing=str(landing), cfg=cfg, dashboard=str(dash))
    assert out["round"] == 0 and "summary" in out["stages"]
    os.environ["FLYWHEEL_S3_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # the next round cannot reach the lake
    reset_settings_cache()
    with pytest.raises(Exception) as e:
        flywheel_round(lake=lake, round=1, landing=str(landing), cfg=cfg)
    _clean(str(e.value) + "".join(__import__("traceback").format_exception(e.value)), "a failed round's exception")
    record, arts = _prefect_record("flywheel-round-0")
    assert arts and "Flywheel round 0" in arts[0].data and lake.split("/")[2] in record  # the record is about this lake
    _clean(record, "the Prefect record of two rounds (artifact, logs, runs)")
    _clean(dash.read_text(errors="replace"), "the dashboard page")
