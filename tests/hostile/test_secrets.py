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
def secret_env(moto_server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:  # noqa: ANN001
    from flywheel.settings import reset_settings_cache

    env = {**moto_server.env(), "FLYWHEEL_S3_SECRET_ACCESS_KEY": SECRET, "FLYWHEEL_S3_ACCESS_KEY_ID": KEY_ID,
           "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ACCESS_KEY_ID": KEY_ID, "FLYWHEEL_S3_MAX_ATTEMPTS": "1",
           "FLYWHEEL_S3_CONNECT_TIMEOUT_S": "1", "FLYWHEEL_S3_READ_TIMEOUT_S": "2"}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    reset_settings_cache()
    return env


def _clean(text: str, where: str) -> None:
    for s in (SECRET, KEY_ID):
        assert s not in text, f"{s[:6]}... leaked in {where}: ...{text[max(text.find(s) - 200, 0): text.find(s) + 50]}..."


def _run(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "flywheel", *args], capture_output=True, text=True, input=stdin,
                       env={**os.environ, **env, "COLUMNS": "200"}, timeout=180)  # fmt: skip
    _clean(r.stdout + r.stderr, f"flywheel {' '.join(args)}")
    return r


@pytest.mark.slow
def test_commands_never_print_credentials(moto_server, secret_env: dict[str, str], tmp_path: Path) -> None:  # noqa: ANN001
    lake = f"s3://{moto_server.new_bucket()}/lake"
    f = write_lines(tmp_path / "r.jsonl", [attempt(i, screen_width=100, screen_height=80) for i in range(20)] + ["{not json"])
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


def test_errors_and_reprs_never_hold_credentials(moto_server, secret_env: dict[str, str]) -> None:  # noqa: ANN001
    from flywheel.settings import get_settings, reset_settings_cache
    from storage import Lake
    from storage.errors import LakeError

    lake = Lake.open(f"s3://{moto_server.new_bucket()}/lake", create=True)
    _clean(repr(lake) + str(lake.uri) + repr(lake.uri) + repr(get_settings()) + str(get_settings()) + json.dumps(get_settings().masked()), "reprs")
    os.environ["FLYWHEEL_S3_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    reset_settings_cache()
    for fn in (lambda: Lake.open(str(lake.uri)), lambda: Lake.open("s3://no-such-bucket-y/lake")):
        with pytest.raises(LakeError) as e:
            fn()
        _clean(str(e.value) + repr(e.value) + "".join(__import__("traceback").format_exception(e.value)), "an exception")


@pytest.mark.slow
def test_prefect_logs_and_artifacts_never_hold_credentials(moto_server, secret_env: dict[str, str], tmp_path: Path, prefect_harness) -> None:  # noqa: ANN001
    from prefect.client.orchestration import get_client

    from flows.ingest_records import ingest_rollouts
    from flows.maintain import maintain_flow
    from flywheel.settings import reset_settings_cache

    lake = f"s3://{moto_server.new_bucket()}/lake"
    f = write_lines(tmp_path / "r.jsonl", [attempt(i, screen_width=100, screen_height=80) for i in range(10)] + ["[1, 2]"])
    ingest_rollouts([str(f)], lake=lake, round=1)
    maintain_flow(lake, retain_hours=0)
    os.environ["FLYWHEEL_S3_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"  # the endpoint dies: flows fail and log why
    reset_settings_cache()
    for flow in (lambda: ingest_rollouts([str(f)], lake=lake, round=1), lambda: maintain_flow(lake)):
        with pytest.raises(Exception) as e:
            flow()
        _clean(str(e.value) + "".join(__import__("traceback").format_exception(e.value)), "a flow's exception")
    with get_client(sync_client=True) as client:
        logs = client.read_logs(limit=200)
        artifacts = client.read_artifacts(limit=200)
        runs = client.read_flow_runs(limit=50)
        task_runs = client.read_task_runs(limit=200)
    assert logs and runs
    _clean("\n".join(log.message for log in logs), "Prefect logs")
    _clean("\n".join(json.dumps(a.model_dump(mode="json"), default=str) for a in artifacts), "Prefect artifacts")
    _clean("\n".join(json.dumps(r.model_dump(mode="json"), default=str) for r in runs), "Prefect flow runs (parameters, states)")
    _clean("\n".join(json.dumps(t.model_dump(mode="json"), default=str) for t in task_runs), "Prefect task runs")
    assert any("Traceback" in log.message or "failed" in log.message.lower() for log in logs)  # the failures were logged
