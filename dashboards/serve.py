"""Serve the dashboard on 127.0.0.1 with the standard library's http.server.

The page is re-rendered when a table's Delta version has changed since the last render (checked on each request
for the page, which costs one metadata read per table), so a browser reload shows the latest round.

Only the page is served, for GET and HEAD alike (no other file of its folder, no listing: the handler is a plain
BaseHTTPRequestHandler, not a file server), and only to requests whose Host header names this server by its
loopback address or `localhost` (a DNS-rebinding page in a browser sends its own host name and is refused).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dashboards.render import render_dashboard
from schemas.tables import TABLES
from storage.lake import Lake


class DashboardServer:
    """Renders `out` from `lake` and serves it at http://127.0.0.1:PORT/ (port 0 picks a free one)."""

    def __init__(self, lake: Lake, out: Path, port: int = 8050, host: str = "127.0.0.1") -> None:
        self.lake, self.out = lake, Path(out)
        self._lock = threading.Lock()
        self._seen: tuple[int, ...] | None = None
        self.refresh()
        handler = partial(_Handler, dashboard=self)
        self.httpd = ThreadingHTTPServer((host, port), handler)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def refresh(self) -> bool:
        """Re-render when the lake changed since the last render; True when it did."""
        with self._lock:
            versions = tuple(self.lake.version(t) for t in TABLES)
            if versions == self._seen and self.out.exists():
                return False
            render_dashboard(self.lake, self.out)
            self._seen = versions
            return True

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    def __init__(self, *args, dashboard: DashboardServer, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.dashboard = dashboard
        super().__init__(*args, **kwargs)

    def _host_ok(self) -> bool:
        """The Host header names this server: its bound address or localhost, with its port."""
        host, port = self.server.server_address[:2]
        names = {str(host), "localhost", "127.0.0.1", "[::1]"}
        return self.headers.get("Host", "").strip().lower() in {f"{n}:{port}" for n in names}

    def _page(self, body: bool) -> None:
        if not self._host_ok():
            self.send_error(HTTPStatus.MISDIRECTED_REQUEST, "unknown Host: this server answers only to its own address")
            return
        page = self.dashboard.out.name
        if self.path.split("?", 1)[0] not in ("/", "/index.html", f"/{page}"):
            self.send_error(HTTPStatus.NOT_FOUND, "only the dashboard page is served here")
            return
        try:
            self.dashboard.refresh()
        except Exception as e:  # noqa: BLE001 - keep serving the last good page, say why in the log
            self.log_error("re-render failed: %s", e)
        data = self.dashboard.out.read_bytes()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._page(body=True)

    def do_HEAD(self) -> None:
        self._page(body=False)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:  # errors still go to stderr
        pass


def serve(lake: Lake, out: Path, port: int = 8050, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted (Ctrl-C)."""
    srv = DashboardServer(lake, out, port)
    if on_ready:
        on_ready(srv.url)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.shutdown()
