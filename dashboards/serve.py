"""Serve the dashboard on 127.0.0.1 with the standard library's http.server.

The page is re-rendered when a table's Delta version has changed since the last render (checked on each request
for the page, which costs one metadata read per table), so a browser reload shows the latest round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
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
        handler = partial(_Handler, directory=str(self.out.parent), dashboard=self)
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


class _Handler(SimpleHTTPRequestHandler):
    def __init__(self, *args, dashboard: DashboardServer, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.dashboard = dashboard
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        page = self.dashboard.out.name
        if self.path in ("/", "/index.html", f"/{page}"):
            try:
                self.dashboard.refresh()
            except Exception as e:  # noqa: BLE001 - keep serving the last good page, say why in the log
                self.log_error("re-render failed: %s", e)
            self.path = f"/{page}"
            return super().do_GET()
        self.send_error(HTTPStatus.NOT_FOUND, "only the dashboard page is served here")

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
