"""The object store next to the tables: media and checkpoints, content-addressed by SHA-256 (boto3 on S3).

Rows refer to objects by their lake-relative key (`objects/ab/<sha256><ext>`), so a lake copied to another folder
or bucket still resolves every screenshot and checkpoint. Rows written before that hold absolute URIs of the lake
at write time (a path, file:// or s3://); `object_key_of` maps any of them by its `objects/...` suffix, and the
migration in storage/migrations.py rewrites them to keys.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Protocol

from storage.errors import LakeError
from storage.uri import LakeURI

OBJECTS = "objects"
#: Objects above this size go up as multipart uploads.
_MULTIPART_BYTES = 16 << 20


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def object_key(digest: str, suffix: str = "") -> str:
    """Lake-relative key of a content-addressed object: objects/ab/abcdef...<suffix>."""
    return f"{OBJECTS}/{digest[:2]}/{digest}{suffix}"


#: A content-addressed object's key at the end of any reference to it: objects/<2 hex>/<64 hex><ext>.
_KEY_TAIL = re.compile(r"(?:^|/)(" + OBJECTS + r"/([0-9a-f]{2})/(\2[0-9a-f]{62})(\.[A-Za-z0-9]{1,8})?)$")


def object_key_of(ref: str | None) -> str | None:
    """The lake-relative key of a stored object reference, or None when `ref` names no content-addressed object.

    The one resolver every reader uses (exports, training data, the audit sheet, the workbench, checkpoints):
    a key as new rows store it is returned as is; an absolute URI of this lake or of any other copy of it (an old
    row's local path, file:// or s3:// URI) is mapped by its `objects/ab/<sha256><ext>` suffix.
    """
    if not ref:
        return None
    m = _KEY_TAIL.search(ref.strip())
    return m.group(1) if m else None


class ObjectStore(Protocol):
    uri: LakeURI

    def put_bytes(self, rel: str, data: bytes) -> None: ...
    def get_bytes(self, rel: str) -> bytes | None: ...
    def exists(self, rel: str) -> bool: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete(self, rel: str) -> None: ...

    def put_text(self, rel: str, text: str) -> None: ...
    def get_text(self, rel: str) -> str | None: ...
    def put_object(self, data: bytes, suffix: str = "") -> str: ...
    def get_object(self, ref: str) -> bytes: ...
    def key_of(self, ref: str) -> str: ...


class _Common:
    uri: LakeURI

    def put_bytes(self, rel: str, data: bytes) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def get_bytes(self, rel: str) -> bytes | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def exists(self, rel: str) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def put_text(self, rel: str, text: str) -> None:
        self.put_bytes(rel, text.encode())

    def get_text(self, rel: str) -> str | None:
        b = self.get_bytes(rel)
        return None if b is None else b.decode()

    def put_object(self, data: bytes, suffix: str = "") -> str:
        """Store bytes under their SHA-256 and return the object's lake-relative key (what rows store). Storing the
        same bytes again is free."""
        rel = object_key(sha256_hex(data), suffix)
        if not self.exists(rel):
            self.put_bytes(rel, data)
        return rel

    def rel(self, uri: str) -> str:
        root = self.uri.join()
        if not uri.startswith(root):
            raise LakeError(f"object {uri} is not inside the lake {root}")
        return uri[len(root) :].lstrip("/")

    def key_of(self, ref: str) -> str:
        """The key of an object reference in this store (object_key_of), or LakeError when it names none."""
        key = object_key_of(ref)
        if key is None:
            raise LakeError(f"{ref!r} is not an object of a lake (expected {OBJECTS}/ab/<sha256><ext>)")
        return key

    def get_object(self, ref: str) -> bytes:
        """The bytes of an object reference (a key, or an absolute URI of any copy of the lake: object_key_of)."""
        key = self.key_of(ref)
        data = self.get_bytes(key)
        if data is None:
            raise LakeError(f"object {key} is missing from the object store of {self.uri}")
        return data


class LocalObjectStore(_Common):
    def __init__(self, uri: LakeURI) -> None:
        self.uri = uri

    def _path(self, rel: str) -> Path:
        return Path(self.uri.key(rel))

    def put_bytes(self, rel: str, data: bytes) -> None:
        p = self._path(rel)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")  # write then rename: never a half file
        except OSError as e:
            raise LakeError(f"writing {rel} to {self.uri} failed: {e.strerror or e}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except OSError as e:  # e.g. a full disk: leave no temporary file behind, say what happened in one line
            Path(tmp).unlink(missing_ok=True)
            raise LakeError(f"writing {rel} to {self.uri} failed: {e.strerror or e}") from None

    def get_bytes(self, rel: str) -> bytes | None:
        p = self._path(rel)
        return p.read_bytes() if p.is_file() else None

    def exists(self, rel: str) -> bool:
        return self._path(rel).is_file()

    def delete(self, rel: str) -> None:
        self._path(rel).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        root = Path(self.uri.root)
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(root)) for p in base.rglob("*") if p.is_file())


class S3ObjectStore(_Common):
    def __init__(self, uri: LakeURI) -> None:
        import boto3
        from botocore.config import Config

        self.uri = uri
        self.client = boto3.client(
            "s3",
            endpoint_url=uri.endpoint_url,
            region_name=uri.region,
            aws_access_key_id=uri.access_key_id,
            aws_secret_access_key=uri.secret_access_key,
            config=Config(
                connect_timeout=uri.connect_timeout_s,
                read_timeout=uri.read_timeout_s,
                retries={"total_max_attempts": uri.max_attempts, "mode": "standard"},
            ),
        )

    def _call(self, fn, **kw):  # noqa: ANN001, ANN003, ANN202
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )

        try:
            return fn(Bucket=self.uri.bucket, **kw)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            if code == "NoSuchBucket":
                raise LakeError(
                    f"bucket {self.uri.bucket!r} does not exist at {self.uri.endpoint_url or 'AWS'}"
                ) from None
            raise LakeError(
                f"S3 error {code} on {self.uri}: {e.response.get('Error', {}).get('Message', '')}"
            ) from None
        except (EndpointConnectionError, ConnectTimeoutError):
            raise LakeError(
                f"cannot reach the S3 endpoint {self.uri.endpoint_url or 'AWS'} "
                f"(after {self.uri.max_attempts} tries); check FLYWHEEL_S3_ENDPOINT_URL and the network"
            ) from None
        except ReadTimeoutError:
            raise LakeError(
                f"the S3 endpoint {self.uri.endpoint_url or 'AWS'} did not answer within "
                f"{self.uri.read_timeout_s:g} s (after {self.uri.max_attempts} tries); check the endpoint or raise "
                "FLYWHEEL_S3_READ_TIMEOUT_S"
            ) from None
        except NoCredentialsError:
            raise LakeError(
                "no S3 credentials; set FLYWHEEL_S3_ACCESS_KEY_ID and FLYWHEEL_S3_SECRET_ACCESS_KEY"
            ) from None
        except BotoCoreError as e:
            raise LakeError(f"S3 request failed on {self.uri}: {type(e).__name__}: {e}") from None

    def put_bytes(self, rel: str, data: bytes) -> None:
        if len(data) <= _MULTIPART_BYTES:
            self._call(self.client.put_object, Key=self.uri.key(rel), Body=data)
            return
        # Large data files (Parquet, checkpoints): multipart, parts in parallel, each part retried on its own.
        import io

        from boto3.exceptions import S3UploadFailedError
        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(
            multipart_threshold=_MULTIPART_BYTES, multipart_chunksize=_MULTIPART_BYTES, max_concurrency=4
        )
        try:
            self._call(self.client.upload_fileobj, Fileobj=io.BytesIO(data), Key=self.uri.key(rel), Config=cfg)
        except S3UploadFailedError as e:
            raise LakeError(f"upload of {rel} to {self.uri} failed: {' '.join(str(e).split())}") from None

    def get_bytes(self, rel: str) -> bytes | None:
        r = self._call(self.client.get_object, Key=self.uri.key(rel))
        return None if r is None else r["Body"].read()

    def exists(self, rel: str) -> bool:
        return self._call(self.client.head_object, Key=self.uri.key(rel)) is not None

    def delete(self, rel: str) -> None:
        self._call(self.client.delete_object, Key=self.uri.key(rel))

    def list(self, prefix: str) -> list[str]:
        out: list[str] = []
        base = self.uri.key(prefix)
        strip = len(self.uri.prefix) + 1 if self.uri.prefix else 0
        token = None
        while True:
            kw = {"Prefix": base} | ({"ContinuationToken": token} if token else {})
            r = self._call(self.client.list_objects_v2, **kw) or {}
            out += [o["Key"][strip:] for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                return out
            token = r["NextContinuationToken"]


def open_object_store(uri: LakeURI) -> ObjectStore:
    return S3ObjectStore(uri) if uri.scheme == "s3" else LocalObjectStore(uri)
