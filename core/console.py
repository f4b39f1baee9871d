"""Shared rich consoles and the one-line error exit used by every command."""

from __future__ import annotations

import sys
from typing import NoReturn

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on one line to stderr and exit non-zero (newlines inside are folded)."""
    from rich.markup import escape

    one_line = " ".join(str(message).split())
    err_console.print(f"[bold red]error:[/] {escape(one_line)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def quiet_prefect_console() -> None:
    """Keep Prefect's console output (task tracebacks) out of the CLI unless --debug: the CLI prints one line per
    error itself. Only the terminal handler is raised (Prefect's PREFECT_LOGGING_<path> override, read when its
    logging is set up at the first flow run); logs still reach the Prefect API and UI."""
    import os

    if os.environ.get("FLYWHEEL_DEBUG") != "1":
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
        # Prefect's own services (events, API logs) report each item they could not send while the API is down, one
        # multi-kilobyte line each (the `debug` handler), or write straight to stderr (logging.raiseExceptions).
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_DEBUG_LEVEL", "CRITICAL")
        import logging

        logging.raiseExceptions = False
