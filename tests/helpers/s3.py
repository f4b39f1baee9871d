"""A moto S3 server in a subprocess on 127.0.0.1: real HTTP, as deltalake and boto3 see it in production."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

KEY_ID, SECRET = "testing-key-id", "testing-secret-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MotoServer:
    port: int
    proc: subprocess.Popen
    buckets: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """FLYWHEEL_* settings (and AWS_* for plain boto3 users) pointing at this server."""
        return {
            "FLYWHEEL_S3_ENDPOINT_URL": self.url,
            "FLYWHEEL_S3_ACCESS_KEY_ID": KEY_ID,
            "FLYWHEEL_S3_SECRET_ACCESS_KEY": SECRET,
            "FLYWHEEL_S3_ALLOW_HTTP": "true",
            "FLYWHEEL_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.url, region_name="us-east-1", aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET
        )

    def new_bucket(self) -> str:
        name = f"fw-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        self.buckets.append(name)
        return name

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_moto(port: int | None = None, timeout: float = 30.0) -> MotoServer:
    port = port or free_port()
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.mkdtemp(prefix="moto-"),  # moto writes a request recording into its working directory
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return MotoServer(port, proc)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"moto_server did not listen on {port} within {timeout}s")
