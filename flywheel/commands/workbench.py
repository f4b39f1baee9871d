"""`flywheel workbench serve | add-user`: the browser workbench for annotators, leads and auditors."""

from __future__ import annotations

from typing import Annotated

import typer

from core.console import console, fail
from core.settings import get_settings
from flywheel.commands.common import LakeOpt

wb_app = typer.Typer(help="The annotation workbench: annotate, record and audit in a browser.", no_args_is_help=True)
LandingOpt = Annotated[
    str | None, typer.Option("--landing", help="Landing area: a folder or s3://bucket/prefix (default: settings).")
]


def serve(
    lake: LakeOpt = None,
    landing: LandingOpt = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; 127.0.0.1 keeps it on this machine.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.", min=1, max=65535)] = 8765,
    round: Annotated[int, typer.Option("--round", help="Round that finished sessions are ingested into.", min=0)] = 0,
    model: Annotated[
        str | None, typer.Option("--model", help="Model folder for proposals (default: the lake's newest checkpoint).")
    ] = None,
    insecure_cookies: Annotated[
        bool, typer.Option("--insecure-cookies", help="Send the session cookie over plain HTTP to other hosts.")
    ] = False,
) -> None:
    """Serve the workbench over the lake and the landing area.

    Example: flywheel workbench serve --lake ./lake --landing ./landing --round 3
    """
    import uvicorn

    from flywheel.workbench.app import WorkbenchConfig, create_app

    s = get_settings()
    secret = s.workbench_secret.get_secret_value() if s.workbench_secret else None
    cfg = WorkbenchConfig(lake or s.lake, landing or s.landing, round, secret, not insecure_cookies,
                          int(s.workbench_max_upload_mb * 1024**2), model)  # fmt: skip
    app = create_app(cfg)
    console.print(f"workbench on http://{host}:{port} (lake {cfg.lake}, landing {cfg.landing}, round {round})")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def add_user(
    username: Annotated[str, typer.Argument(help="Login name.")],
    role: Annotated[str, typer.Option("--role", help="annotator | lead | auditor | admin.")] = "annotator",
    group: Annotated[str | None, typer.Option("--group", help="expert | novice (annotators).")] = None,
    password: Annotated[
        str | None, typer.Option("--password", help="Read from the prompt when not given (never echoed).")
    ] = None,
    landing: LandingOpt = None,
) -> None:
    """Create an account (or set a new password and role for an existing one); the password is stored as an Argon2id hash.

    Example: flywheel workbench add-user alice --role annotator --group expert
    """
    from flywheel.people.upload import Landing
    from flywheel.workbench.store import Store

    if password is None:
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True)
    try:
        u = Store(Landing.open(landing or get_settings().landing).store).add_user(username, password, role, group)
    except ValueError as e:
        fail(str(e))
    console.print(f"user {u.username} ({u.role}) saved")


def register(app: typer.Typer) -> None:
    wb_app.command("serve")(serve)
    wb_app.command("add-user")(add_user)
    app.add_typer(wb_app, name="workbench")
