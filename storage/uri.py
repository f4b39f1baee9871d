"""Lake URIs: a local folder or s3://bucket/prefix, with the storage options deltalake and boto3 need."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from storage.errors import LakeError

if TYPE_CHECKING:
    from core.settings import Settings


@dataclass(frozen=True)
class LakeURI:
    scheme: str  # "file" | "s3"
    root: str  # absolute folder path, or "bucket/prefix" for s3
    storage_options: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    endpoint_url: str | None = field(default=None, compare=False)
    region: str = field(default="us-east-1", compare=False)
    access_key_id: str | None = field(default=None, compare=False, repr=False)
    secret_access_key: str | None = field(default=None, compare=False, repr=False)
    connect_timeout_s: float = field(default=3.0, compare=False)
    read_timeout_s: float = field(default=20.0, compare=False)
    max_attempts: int = field(default=3, compare=False)

    @property
    def bucket(self) -> str:
        return self.root.split("/", 1)[0]

    @property
    def prefix(self) -> str:
        parts = self.root.split("/", 1)
        return parts[1].strip("/") if len(parts) > 1 else ""

    def join(self, *parts: str) -> str:
        tail = "/".join(p.strip("/") for p in parts if p)
        if self.scheme == "s3":
            return f"s3://{self.root.rstrip('/')}/{tail}" if tail else f"s3://{self.root}"
        return str(Path(self.root, tail)) if tail else self.root

    def key(self, *parts: str) -> str:
        """Object key (s3) or absolute path (file) of a path relative to the lake root."""
        tail = "/".join(p.strip("/") for p in parts if p)
        if self.scheme == "s3":
            return f"{self.prefix}/{tail}" if self.prefix else tail
        return str(Path(self.root, tail))

    def __str__(self) -> str:
        return self.join()


def parse_lake_uri(uri: str, settings: Settings | None = None) -> LakeURI:
    """Parse a lake location. Unknown schemes are refused with a one-line error."""
    from core.settings import get_settings

    settings = settings or get_settings()
    u = urlparse(uri)
    if u.scheme in ("", "file") or (len(u.scheme) == 1 and uri[1:3] in (":\\", ":/")):
        path = u.path if u.scheme == "file" else uri
        return LakeURI("file", str(Path(path).expanduser().resolve()))
    if u.scheme in ("s3", "s3a"):
        if not u.netloc:
            raise LakeError(f"{uri!r} has no bucket; use s3://bucket/prefix")
        secret = settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else None
        opts: dict[str, str] = {"AWS_REGION": settings.s3_region}
        if settings.s3_endpoint_url:
            opts["AWS_ENDPOINT_URL"] = settings.s3_endpoint_url
        if settings.s3_access_key_id:
            opts["AWS_ACCESS_KEY_ID"] = settings.s3_access_key_id
        if secret:
            opts["AWS_SECRET_ACCESS_KEY"] = secret
        if settings.s3_allow_http or (settings.s3_endpoint_url or "").startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
        # Delta commits on S3 are put-if-absent (If-None-Match: *) in deltalake 1.x whatever this says (seen on
        # the wire, tests/storage/test_concurrency.py); "etag" also lets object_store do conditional overwrites.
        opts["AWS_CONDITIONAL_PUT"] = "etag"
        # Bounded retries and timeouts: an unreachable endpoint is an error in seconds, not object_store's
        # default of 10 retries over up to 3 minutes.
        opts["timeout"] = _duration(settings.s3_read_timeout_s)
        opts["connect_timeout"] = _duration(settings.s3_connect_timeout_s)
        opts["max_retries"] = str(max(settings.s3_max_attempts - 1, 0))
        opts["retry_timeout"] = _duration(settings.s3_read_timeout_s + settings.s3_connect_timeout_s)
        return LakeURI(
            "s3",
            f"{u.netloc}{u.path}".rstrip("/"),
            opts,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=secret,
            connect_timeout_s=settings.s3_connect_timeout_s,
            read_timeout_s=settings.s3_read_timeout_s,
            max_attempts=settings.s3_max_attempts,
        )
    raise LakeError(f"unknown lake URI scheme {u.scheme!r} in {uri!r}; use a local folder or s3://bucket/prefix")


def _duration(seconds: float) -> str:
    """object_store's duration syntax (humantime), at millisecond resolution."""
    return f"{max(int(seconds * 1000), 1)}ms"
