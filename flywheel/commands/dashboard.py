"""`flywheel dashboard`: render the one-page HTML dashboard of the lake, optionally serve it on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from core.console import console, esc, fail
from flywheel.commands.common import LakeOpt, open_lake


def dashboard(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the HTML page.")] = Path(
        "flywheel-dashboard.html"
    ),
    serve: Annotated[
        bool, typer.Option("--serve", help="Serve the page on 127.0.0.1 (re-rendered when the lake changes).")
    ] = False,
    port: Annotated[int, typer.Option(help="Port for --serve (0 picks a free one).")] = 8050,
    lake: LakeOpt = None,
) -> None:
    """Render every panel (pass rates, piles, validator reasons, audits, annotation quality, training, quarantine)
    into one self-contained HTML page that opens with no network.

    Example: flywheel dashboard --lake ./lake --out dashboard.html --serve
    """
    from dashboards.render import build_page, write_atomic

    if not 0 <= port <= 65535:
        fail(f"--port must be between 0 and 65535, got {port}")
    if out.exists() and out.is_dir():
        fail(f"--out {out} is a folder; give a file name such as {out / 'dashboard.html'}")
    lk = open_lake(lake)
    if serve:
        from dashboards.serve import serve as serve_page

        console.print("rendering the dashboard ...")
        try:
            serve_page(
                lk,
                out,
                port,
                on_ready=lambda url: console.print(
                    f"serving [bold]{url}[/] (page {esc(out)}); Ctrl-C stops", soft_wrap=True
                ),
            )
        except OSError as e:
            fail(f"cannot serve on 127.0.0.1:{port}: {e.strerror or e}")
        return
    with console.status("rendering the dashboard"):
        page = build_page(lk)
        path = write_atomic(page.html, out)
    _summary(page)
    console.print(f"wrote [bold]{esc(path)}[/] ({len(page.panels)} panels, {page.seconds:.2f} s)", soft_wrap=True)


def _summary(page) -> None:  # noqa: ANN001

    t = Table("panel", "state", "ms", title="panels")
    style = {"ok": "green", "empty": "yellow", "error": "red"}
    for p in page.panels:
        t.add_row(
            esc(p.title),
            f"[{style[p.state]}]{p.state}[/]" + (f": {esc(p.message)}" if p.state == "error" else ""),
            p.ms,
        )
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command()(dashboard)
