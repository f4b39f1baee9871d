"""A fault-injecting HTTP proxy on 127.0.0.1, put in front of the moto S3 server to play a failing endpoint.

Every request goes through its own upstream connection (the proxy asks for `Connection: close`), so faults are
decided per request. Faults, each for the next `count` matching requests or for `seconds`:

    error     answer 500 InternalError (or 503 SlowDown) without forwarding: what a struggling S3 does
    hang      read the request and never answer (until `hang_s`): a timeout
    reset     accept and reset the connection: an endpoint that is gone
    cut       forward the request head and only `after_bytes` of its body, then drop both sides: vanished mid-write
    drop      forward the whole request, let the server apply it, then drop the answer: the nastiest case, the
              client does not know whether its write (a Delta commit) happened

`match` restricts a fault to requests whose first line contains it (e.g. b"PUT", b"_delta_log", b".parquet").
`rate` (0-1, seeded) makes a fault hit only that share of matching requests.
"""

from __future__ import annotations

import random
import select
import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass, field

_HEAD_END = b"\r\n\r\n"


@dataclass
class Fault:
    kind: str  # error | hang | reset | cut | drop
    count: int | None = None  # None: until `until`
    until: float | None = None  # monotonic deadline
    match: bytes = b""
    rate: float = 1.0
    status: int = 500
    after_bytes: int = 0
    hang_s: float = 30.0


@dataclass
class Stats:
    requests: int = 0
    injected: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # request lines seen (method + path), for debugging a test
    seconds: list[float] = field(default_factory=list)  # time each request spent in the proxy


class FaultProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", seed: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.faults: list[Fault] = []
        self.stats = Stats()
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------------------------------- control
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def inject(self, kind: str, *, count: int | None = None, seconds: float | None = None, match: bytes = b"",
               rate: float = 1.0, status: int = 500, after_bytes: int = 0, hang_s: float = 30.0) -> Fault:  # fmt: skip
        """Add a fault for the next `count` matching requests, or for `seconds` (or forever if neither)."""
        if kind not in ("error", "hang", "reset", "cut", "drop"):
            raise ValueError(f"unknown fault {kind!r}")
        f = Fault(
            kind,
            count,
            None if seconds is None else time.monotonic() + seconds,
            match,
            rate,
            status,
            after_bytes,
            hang_s,
        )
        with self._lock:
            self.faults.append(f)
        return f

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def injected(self, kind: str | None = None) -> int:
        return sum(self.stats.injected.values()) if kind is None else self.stats.injected.get(kind, 0)

    def _pick(self, line: bytes) -> Fault | None:
        with self._lock:
            self.stats.requests += 1
            self.stats.lines.append(line.decode(errors="replace"))
            now = time.monotonic()
            self.faults = [
                f for f in self.faults if (f.count is None or f.count > 0) and (f.until is None or f.until > now)
            ]
            for f in self.faults:
                if f.match and f.match not in line:
                    continue
                if f.rate < 1.0 and self._rng.random() >= f.rate:
                    continue
                if f.count is not None:
                    f.count -= 1
                self.stats.injected[f.kind] = self.stats.injected.get(f.kind, 0) + 1
                return f
        return None

    # ------------------------------------------------------------------------------------------- wire
    def _handle(self, client: socket.socket) -> None:
        client.settimeout(60)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms Nagle/delayed-ACK stall per request
        try:
            head, rest = _read_head(client)
        except OSError:
            return
        if not head:
            return
        line = head.split(b"\r\n", 1)[0]
        fault = self._pick(line)
        t0 = time.monotonic()
        try:
            if fault is None:
                self._forward(client, head, rest, None)
            elif fault.kind == "error":
                _drain_body(client, head, rest)
                code = b"SlowDown" if fault.status == 503 else b"InternalError"
                body = (
                    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>"
                    + code
                    + b"</Code><Message>injected fault</Message></Error>"
                )
                reason = b"Service Unavailable" if fault.status == 503 else b"Internal Server Error"
                client.sendall(
                    b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                    % (fault.status, reason, len(body))
                    + body
                )
            elif fault.kind == "hang":
                deadline = time.monotonic() + fault.hang_s
                while time.monotonic() < deadline:  # keep reading (the client may still send its body), never answer
                    r, _, _ = select.select([client], [], [], 0.2)
                    if r and not client.recv(65536):
                        break
            elif fault.kind == "reset":
                _reset(client)
            elif fault.kind in ("cut", "drop"):
                self._forward(client, head, rest, fault)
        except OSError:
            pass
        finally:
            self.stats.seconds.append(time.monotonic() - t0)
            try:
                client.close()
            except OSError:
                pass

    def _forward(self, client: socket.socket, head: bytes, rest: bytes, fault: Fault | None) -> None:
        up = socket.create_connection(self.upstream, timeout=60)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            up.sendall(_connection_close(head))
            if fault is not None and fault.kind == "cut":
                sent = rest[: fault.after_bytes]
                up.sendall(sent)
                while len(sent) < fault.after_bytes:
                    more = client.recv(min(65536, fault.after_bytes - len(sent)))
                    if not more:
                        break
                    up.sendall(more)
                    sent += more
                _reset(client)
                _reset(up)
                return
            if rest:
                up.sendall(rest)
            if fault is not None and fault.kind == "drop":
                _pipe_body(client, up, head, rest)
                up.shutdown(socket.SHUT_WR)
                while up.recv(65536):  # let the server finish applying the request, discard its answer
                    pass
                _reset(client)
                return
            _pipe(client, up)
        finally:
            try:
                up.close()
            except OSError:
                pass


def _read_head(s: socket.socket) -> tuple[bytes, bytes]:
    buf = b""
    while _HEAD_END not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return b"", b""
        buf += chunk
        if len(buf) > 1 << 20:
            raise OSError("request head too large")
    i = buf.index(_HEAD_END) + len(_HEAD_END)
    return buf[:i], buf[i:]


def _content_length(head: bytes) -> int | None:
    for ln in head.split(b"\r\n")[1:]:
        k, _, v = ln.partition(b":")
        if k.strip().lower() == b"content-length":
            return int(v.strip())
    return None


def _drain_body(client: socket.socket, head: bytes, rest: bytes) -> None:
    n = _content_length(head)
    if n is None:
        return
    left = n - len(rest)
    while left > 0:
        chunk = client.recv(min(65536, left))
        if not chunk:
            return
        left -= len(chunk)


def _pipe_body(client: socket.socket, up: socket.socket, head: bytes, rest: bytes) -> None:
    n = _content_length(head)
    left = 0 if n is None else n - len(rest)
    while left > 0:
        chunk = client.recv(min(65536, left))
        if not chunk:
            return
        up.sendall(chunk)
        left -= len(chunk)


def _connection_close(head: bytes) -> bytes:
    lines = [
        ln
        for ln in head[: -len(_HEAD_END)].split(b"\r\n")
        if not ln.lower().startswith((b"connection:", b"keep-alive:"))
    ]
    return b"\r\n".join(lines + [b"Connection: close"]) + _HEAD_END


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until the server closes (it was asked to close after its answer)."""
    socks = [a, b]
    while True:
        r, _, _ = select.select(socks, [], [], 60)
        if not r:
            return
        for s in r:
            data = s.recv(65536)
            if not data:
                if s is b:
                    return
                socks = [b]  # the client finished sending; wait for the server's answer
                continue
            (b if s is a else a).sendall(data)


def _reset(s: socket.socket) -> None:
    """Close with RST, as a crashed peer does."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()
