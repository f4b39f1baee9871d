"""A refusing proxy on 127.0.0.1 that records every request a browser tried to send off the machine.

The pool starts Chromium with ``--proxy-server`` pointing here (and ``--proxy-bypass-list=<-loopback>``, so
only loopback traffic, chromedriver's own, goes direct). MiniWoB pages are file:// URLs and need no network,
so any connection that arrives here is an attempt to reach the outside: its request line is recorded
(``attempts``) and answered with 403. A run is clean when ``attempts`` is empty at the end.

Complementary check: `outside_connections(pids)` lists the TCP/UDP sockets of given processes whose remote
address is not loopback (from /proc via psutil), for traffic that would bypass the proxy.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import socketserver
import threading
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Attempt:
    client_port: int
    request: str  # the request line, e.g. "CONNECT example.com:443 HTTP/1.1"


class NetGuard:
    """Start with `with NetGuard() as g:`; pass `g.port` to browsers; read `g.attempts`."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()
        guard = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(2.0)
                data = b""
                with contextlib.suppress(OSError):
                    while b"\n" not in data and len(data) < 4096:
                        chunk = self.request.recv(1024)
                        if not chunk:
                            break
                        data += chunk
                line = data.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("latin-1", "replace").strip()
                with guard._lock:
                    guard.attempts.append(Attempt(self.client_address[1], line or "<no request line>"))
                with contextlib.suppress(OSError):
                    self.request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="netguard", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> NetGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_loopback(ip: str) -> bool:
    try:
        a = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return a.is_loopback


def outside_connections(pids: Iterable[int]) -> list[str]:
    """Sockets of these processes (and their children) connected to a non-loopback address."""
    import psutil

    out: list[str] = []
    seen: set[int] = set()
    procs: list[psutil.Process] = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
    for p in procs:
        if p.pid in seen:
            continue
        seen.add(p.pid)
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for c in p.net_connections(kind="inet"):
                if c.raddr and not _is_loopback(c.raddr.ip):
                    kind = "tcp" if c.type == socket.SOCK_STREAM else "udp"
                    out.append(f"pid {p.pid} ({p.name()}) {kind} -> {c.raddr.ip}:{c.raddr.port} {c.status}")
    return out
