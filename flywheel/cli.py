"""The `flywheel` command line. Each area adds its commands in flywheel/commands/<area>.py via `register(app)`."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import NoReturn

import typer

from core.console import console, fail
from core.process import exit_code, leave

app = typer.Typer(
    name="flywheel",
    help="An open data flywheel for computer-use agents: ingest, validate, route, train, repeat.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

#: Command modules, each with `register(app: typer.Typer)`. Order is the order of `flywheel --help`.
COMMAND_MODULES = (
    "flywheel.commands.lake",  # init, tables, sql, shell, config
    "flywheel.commands.ingest",  # ingest think-aloud | annotations | rollouts
    "flywheel.commands.routing",  # route, simulate
    "flywheel.commands.demo",  # demo
    "flywheel.commands.rounds",  # round run | status | resume, serve
    "flywheel.commands.people",  # upload, sessions, audit, export
    "flywheel.commands.dashboard",  # dashboard
    "flywheel.commands.workbench",  # workbench serve | add-user
    "flywheel.commands.policy",  # policy serve
    "flywheel.commands.ops",  # maintain, check
)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors.")) -> None:
    if debug:
        os.environ["FLYWHEEL_DEBUG"] = "1"


def _register_all() -> None:
    for mod in COMMAND_MODULES:
        if importlib.util.find_spec(mod) is not None:
            importlib.import_module(mod).register(app)


_register_all()


def _click_exceptions() -> tuple[type[BaseException], ...]:
    """Usage errors from typer's own (vendored) click and from plain click: shown as click shows them."""
    import click

    kinds: list[type[BaseException]] = [click.exceptions.ClickException]
    try:
        from typer._click.exceptions import ClickException as VendoredClickException

        kinds.append(VendoredClickException)
    except ImportError:  # older typer uses click directly
        pass
    return tuple(kinds)


def main() -> NoReturn:
    """Entry point: run the command, then leave without finalising the interpreter (core.process.leave says why)."""
    leave(run())


def run(argv: list[str] | None = None) -> int:
    """Run the app and return the exit status; known errors become one line on stderr (status 1), tracebacks only
    with --debug."""
    try:
        _run(argv)
    except SystemExit as e:
        return exit_code(e)
    return 0


def _run(argv: list[str] | None) -> None:
    from storage.errors import LakeError

    debug = "--debug" in (sys.argv if argv is None else argv) or os.environ.get("FLYWHEEL_DEBUG") == "1"
    try:
        rc = app(args=argv, standalone_mode=False)
        if isinstance(rc, int) and rc:  # `raise typer.Exit(1)` in a command: click returns the code here
            sys.exit(rc)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        fail("aborted", 130)
    except Exception as e:  # noqa: BLE001 - the CLI boundary: one line, traceback on --debug
        if isinstance(e, _click_exceptions()):
            e.show()
            sys.exit(e.exit_code)
        if debug:
            console.print_exception()
            sys.exit(1)
        kind = "" if isinstance(e, (LakeError, ValueError, FileNotFoundError)) else f"{type(e).__name__}: "
        fail(f"{kind}{e}")


if __name__ == "__main__":
    main()
