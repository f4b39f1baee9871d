"""The dashboard server serves its page and nothing else, for GET and HEAD, and only to its own Host name."""

from __future__ import annotations

import http.client
import threading
from pathlib import Path

import pytest

from dashboards.serve import DashboardServer


@pytest.fixture
def server(lake, tmp_path: Path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "secret.txt").write_text("not for the browser")
    (site / "sub").mkdir()
    srv = DashboardServer(lake, site / "dash.html", port=0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


def _ask(srv: DashboardServer, method: str, path: str, host: str | None = None) -> tuple[int, bytes, dict]:
    h, port = srv.httpd.server_address[:2]
    c = http.client.HTTPConnection(h, port, timeout=30)
    c.putrequest(method, path, skip_host=True)
    c.putheader("Host", host if host is not None else f"{h}:{port}")
    c.endheaders()
    r = c.getresponse()
    out = r.status, r.read(), dict(r.getheaders())
    c.close()
    return out


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_only_the_page(server, method: str) -> None:
    status, body, headers = _ask(server, method, "/")
    assert status == 200 and int(headers["Content-Length"]) == len(server.out.read_bytes())
    assert (body == b"") == (method == "HEAD")
    for path in ("/secret.txt", "/sub/", "/sub", "/../secret.txt", "/dash.html/../secret.txt", "//secret.txt"):
        status, body, headers = _ask(server, method, path)
        assert status == 404, path
        assert b"not for the browser" not in body and "Last-Modified" not in headers


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "", "127.0.0.1:1", "localhost.evil:{port}"])
def test_foreign_host_refused(server, host: str) -> None:
    port = server.httpd.server_address[1]
    for method in ("GET", "HEAD"):
        status, body, _ = _ask(server, method, "/", host=host.format(port=port))
        assert status == 421 and b"data-panel" not in body
    assert _ask(server, "GET", "/", host=f"localhost:{port}")[0] == 200
