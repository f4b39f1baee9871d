"""Bad input to the lake commands: a one-line error that says what to do, no traceback unless --debug."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.tables import TABLES
from storage import Lake
from storage.delta import MANIFEST
from tests.helpers.s3 import KEY_ID, SECRET, free_port
from tests.storage.cli import assert_one_line_error, flywheel, main_inprocess

S3_ENV = {
    "FLYWHEEL_S3_ACCESS_KEY_ID": KEY_ID,
    "FLYWHEEL_S3_SECRET_ACCESS_KEY": SECRET,
    "FLYWHEEL_S3_ALLOW_HTTP": "true",
}


def test_unknown_uri_scheme() -> None:
    r = flywheel("tables", "--lake", "ftp://host/lake")
    assert_one_line_error(r, "unknown lake URI scheme 'ftp'", "s3://bucket/prefix")
    r = flywheel("--debug", "tables", "--lake", "ftp://host/lake")
    assert r.code == 1 and "Traceback" in r.err + r.out  # --debug shows where it came from


def test_folder_that_is_not_a_lake(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    for cmd in (["tables"], ["sql", "SELECT 1"], ["shell"]):
        assert_one_line_error(main_inprocess(*cmd, "--lake", str(tmp_path)), "is not a flywheel lake", "flywheel init")


def test_table_written_by_a_newer_schema_version(lake) -> None:
    m = lake.read_manifest()
    m["tables"]["episodes"] = TABLES["episodes"].version + 1
    lake.objects.put_text(MANIFEST, json.dumps(m))
    assert_one_line_error(main_inprocess("tables", "--lake", str(lake.uri)), "'episodes'", "upgrade flywheel")


def test_bad_query_and_bad_version(lake) -> None:
    assert_one_line_error(main_inprocess("sql", "SELEKT 1", "--lake", str(lake.uri)), "query failed", "syntax error")
    r = main_inprocess("sql", "SELECT count(*) FROM sft", "--lake", str(lake.uri), "--as-of-version", "7")
    assert_one_line_error(r, "'sft' has versions 0..0")
    assert_one_line_error(
        main_inprocess("sql", "SELECT 1", "--lake", str(lake.uri), "--as-of-version", "x=1"), "unknown table 'x'"
    )


def test_unreachable_s3_endpoint_fails_within_seconds() -> None:
    """Nothing listens on the port: boto3 and deltalake both give up after bounded retries."""
    env = {**S3_ENV, "FLYWHEEL_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    for cmd in ("tables", "init"):
        r = main_inprocess(cmd, "--lake", "s3://bucket/lake", env=env)
        assert_one_line_error(r, "cannot reach the S3 endpoint", "FLYWHEEL_S3_ENDPOINT_URL")
        assert r.seconds < 15, f"{cmd} took {r.seconds:.1f} s"


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (a hung proxy or server)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_silent_s3_endpoint_times_out(silent_endpoint: str) -> None:
    env = {**S3_ENV, "FLYWHEEL_S3_ENDPOINT_URL": silent_endpoint, "FLYWHEEL_S3_READ_TIMEOUT_S": "1"}
    r = main_inprocess("tables", "--lake", "s3://bucket/lake", env=env)
    assert_one_line_error(r, "did not answer within 1 s", "FLYWHEEL_S3_READ_TIMEOUT_S")
    assert r.seconds < 12, f"took {r.seconds:.1f} s"


def test_missing_bucket_and_missing_lake_on_s3(moto_server) -> None:
    env = {**S3_ENV, "FLYWHEEL_S3_ENDPOINT_URL": moto_server.url}
    assert_one_line_error(
        main_inprocess("tables", "--lake", "s3://no-such-bucket/lake", env=env),
        "bucket 'no-such-bucket' does not exist",
    )
    bucket = moto_server.new_bucket()
    assert_one_line_error(
        main_inprocess("tables", "--lake", f"s3://{bucket}/lake", env=env), "not a flywheel lake", "flywheel init"
    )
    r = main_inprocess("init", "--lake", f"s3://{bucket}/lake", env=env)
    assert r.code == 0, r.err
    assert main_inprocess("tables", "--lake", f"s3://{bucket}/lake", env=env).code == 0


def test_s3_lake_opens_after_init(s3_lake) -> None:
    """The same lake object API works through the fixture's S3 settings (sanity for the CLI cases above)."""
    assert Lake.open(str(s3_lake.uri)).count("episodes") == 0


def test_deltalake_calls_are_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Delta side (delta-rs's object_store) also gives up quickly: bounded max_retries and retry_timeout."""
    from core.settings import reset_settings_cache
    from storage import LakeError
    from storage.objects import open_object_store
    from storage.uri import parse_lake_uri

    for k, v in {**S3_ENV, "FLYWHEEL_S3_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}.items():
        monkeypatch.setenv(k, v)
    reset_settings_cache()
    lu = parse_lake_uri("s3://bucket/lake")
    import time

    t = time.monotonic()
    with pytest.raises(LakeError, match="unreachable") as e:
        Lake(lu, open_object_store(lu)).delta("episodes")
    assert time.monotonic() - t < 15 and "\n" not in str(e.value)
