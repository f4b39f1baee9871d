"""A lock in the lake with a lease: one flywheel round at a time, across processes and machines.

The lock is one small object (`locks/<name>.json`) created with create-if-absent semantics: O_EXCL on a local
folder, a conditional put (If-None-Match: *) on S3. It names its holder and expires `lease_s` after its last
heartbeat, so a crashed holder (kill -9) does not block the lake forever: the next start sees an expired lease and
takes it over with a compare-and-swap on the old lease's content.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from storage.errors import LakeError
from storage.lake import Lake


class LockHeld(LakeError):
    """Another holder has the lock; the message says who and since when."""


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    what: str  # e.g. "round 3"
    acquired_at: float
    expires_at: float
    token: str

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.acquired_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{self.what} is running (held by {self.holder} since {since})"


def _holder_alive(holder: str) -> bool:
    """False only for a process of this host ("host:pid") that no longer exists; anything else may be alive."""
    host, _, pid = holder.rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return True


def _make_guard(guard: Path, holder: str) -> bool:
    """Create `guard` already naming `holder`, or False if it exists. Why in one step (a hard link to a written file):
    created empty and written after, a guard whose process was killed in between named no one, so it counted as
    alive and blocked the takeover after a kill -9 for 30 s (CI, the MiniWoB++ kill test's resume after intake)."""
    tmp = guard.with_name(f".{guard.name}.{uuid.uuid4().hex}")
    tmp.write_text(holder)
    try:
        os.link(tmp, guard)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _alive(lease: Lease) -> bool:
    """A lease is live until it expires, unless its holder was a process on this host that no longer exists
    (killed with -9): then it is dead at once and the next start need not wait for the lease to run out."""
    return lease.expires_at > time.time() and _holder_alive(lease.holder)


class LakeLock:
    """`with LakeLock(lake, "round", what="round 3"):` ... Raises LockHeld if a live lease exists."""

    def __init__(self, lake: Lake, name: str, what: str = "", lease_s: float = 120.0, heartbeat: bool = True) -> None:
        self.lake = lake
        self.name = name
        self.what = what or name
        self.lease_s = lease_s
        self.rel = f"locks/{name}.json"
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.lease: Lease | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._heartbeat = heartbeat

    # -- storage primitives: create-if-absent and compare-and-swap ---------------------------------------------
    def _read(self) -> tuple[Lease | None, str | None]:
        raw = self.lake.objects.get_text(self.rel)
        if raw is None:
            return None, None
        try:
            return Lease(**json.loads(raw)), raw
        except (TypeError, ValueError):
            return None, raw  # unreadable lock: treat as expired

    def _create(self, body: str) -> bool:
        uri = self.lake.uri
        if uri.scheme == "file":
            p = Path(uri.key(self.rel))
            p.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            return True
        return self._s3_put(body, IfNoneMatch="*")

    def _swap(self, old_raw: str, body: str) -> bool:
        """Replace the lock only if it still holds old_raw (no one else took it over meanwhile)."""
        uri = self.lake.uri
        if uri.scheme == "file":
            p = Path(uri.key(self.rel))
            tmp = p.with_name(f".{p.name}.{uuid.uuid4().hex}")
            guard = p.with_name(f"{p.name}.takeover")
            if not _make_guard(guard, self.holder):  # a takeover guard file, naming its holder, serialises swaps
                # a guard left by a process killed inside its swap (kill -9 during a stage-name update) must not
                # block the takeover that follows: its holder is dead, so it goes at once; any other after 30 s
                try:
                    stale = not _holder_alive(guard.read_text()) or time.time() - guard.stat().st_mtime >= 30
                except FileNotFoundError:
                    stale = False  # its holder just finished
                if not stale:
                    return False
                guard.unlink(missing_ok=True)
                if not _make_guard(guard, self.holder):
                    return False
            try:
                if not p.exists() or p.read_text() != old_raw:
                    return False
                tmp.write_text(body)
                os.replace(tmp, p)
                return True
            finally:
                guard.unlink(missing_ok=True)
        store = self.lake.objects
        head = store.client.head_object(Bucket=uri.bucket, Key=uri.key(self.rel))  # type: ignore[attr-defined]
        if store.get_text(self.rel) != old_raw:
            return False
        return self._s3_put(body, IfMatch=head["ETag"])

    def _s3_put(self, body: str, **cond: str) -> bool:
        from botocore.exceptions import ClientError

        store = self.lake.objects
        try:
            store.client.put_object(  # type: ignore[attr-defined]
                Bucket=self.lake.uri.bucket, Key=self.lake.uri.key(self.rel), Body=body.encode(), **cond
            )
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
                return False
            raise

    def _delete(self) -> None:
        uri = self.lake.uri
        if uri.scheme == "file":
            Path(uri.key(self.rel)).unlink(missing_ok=True)
        else:
            self.lake.objects.client.delete_object(Bucket=uri.bucket, Key=uri.key(self.rel))  # type: ignore[attr-defined]

    # -- the lock ----------------------------------------------------------------------------------------------
    def _new_lease(self, token: str | None = None) -> Lease:
        now = time.time()
        return Lease(self.name, self.holder, self.what, now, now + self.lease_s, token or uuid.uuid4().hex)

    def current(self) -> Lease | None:
        """The live lease, if any (an expired one, or one whose holder died on this host, counts as none)."""
        lease, _ = self._read()
        return lease if lease and _alive(lease) else None

    def update(self, what: str) -> None:
        """Say what the holder is doing now (e.g. the stage), so a second start can tell."""
        lease, raw = self._read()
        if self.lease is None or lease is None or raw is None or lease.token != self.lease.token:
            return
        new = Lease(**{**asdict(lease), "what": what})
        if self._swap(raw, json.dumps(asdict(new))):
            self.lease = new

    def acquire(self) -> Lease:
        lease = self._new_lease()
        body = json.dumps(asdict(lease))
        if self._create(body):
            self.lease = lease
        else:
            old, raw = self._read()
            if old is not None and _alive(old):
                raise LockHeld(
                    f"another run holds the lock: {old.describe()}; wait for it or run `flywheel round status`"
                )
            if raw is None or not self._swap(raw, body):
                if raw is None and self._create(body):
                    self.lease = lease
                else:
                    cur = self.current()
                    raise LockHeld(f"another run holds the lock: {cur.describe() if cur else 'taking it over now'}")
            self.lease = lease
        if self._heartbeat:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return lease

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            lease, raw = self._read()
            if lease is None or raw is None or self.lease is None or lease.token != self.lease.token:
                return  # lost the lock (taken over after we stalled): stop renewing
            renewed = Lease(**{**asdict(self.lease), "expires_at": time.time() + self.lease_s})
            if self._swap(raw, json.dumps(asdict(renewed))):
                self.lease = renewed

    def release(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        lease, _ = self._read()
        if lease and self.lease and lease.token == self.lease.token:
            self._delete()
        self.lease = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
