"""The network lock is real: a page's request to the outside lands in the refusing proxy, and sockets to
non-loopback addresses are seen. (test_pool checks that a whole run records neither.)"""

from __future__ import annotations

import os
import socket
import time

import psutil
import pytest

from sandbox.miniwob import TaskSpec
from sandbox.miniwob.netguard import outside_connections


def test_a_page_request_to_the_outside_is_caught_and_refused(pool) -> None:
    env = pool.env(0)
    env.reset(TaskSpec("click-button", 1))
    before = len(pool.guard.attempts)
    got = env.browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('http://example.com/flywheel-probe').then(r => done('status ' + r.status), e => done('error ' + e));"
    )
    new_img = "var i = new Image(); i.src = 'https://example.org/probe.png'; return 1;"
    env.browser.driver.execute_script(new_img)
    t_end = time.monotonic() + 5
    while time.monotonic() < t_end and len(pool.guard.attempts) < before + 2:
        time.sleep(0.05)
    reqs = [a.request for a in pool.guard.attempts[before:]]
    assert any(r.startswith("GET http://example.com/flywheel-probe") for r in reqs), reqs
    assert any(r.startswith("CONNECT example.org:443") for r in reqs), reqs
    assert not got.startswith("status 2")  # refused, never answered by the outside
    pool.guard.attempts[before:] = []  # the probes are this test's; the pool test expects a clean run
    assert outside_connections(env.browser.pids) == []


def _lan_ip() -> str | None:
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def test_outside_connections_sees_a_non_loopback_socket() -> None:
    ip = _lan_ip()
    if ip is None:
        pytest.skip("no non-loopback IPv4 address on this machine")
    srv = socket.socket()
    srv.bind((ip, 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    try:
        seen = outside_connections([os.getpid()])
        assert any(f"-> {ip}:{srv.getsockname()[1]}" in s for s in seen), seen
    finally:
        cli.close()
        srv.close()


def test_every_pool_browser_runs_behind_the_lock(pool) -> None:
    for i in range(pool.size):
        e = pool.env(i)
        e.reset(TaskSpec("click-link", 2))
        cmd = psutil.Process(e.browser.chrome_pid).cmdline()
        assert f"--proxy-server=http://127.0.0.1:{pool.guard.port}" in cmd and "--proxy-bypass-list=<-loopback>" in cmd
        assert "--disable-background-networking" in cmd and any(
            c.startswith("--host-resolver-rules=MAP * ~NOTFOUND") for c in cmd
        )
