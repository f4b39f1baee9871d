"""Shared rich consoles and the one-line error exit used by every command."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from rich.console import Console

#: Width when output is not a terminal (a log file, a pipe, CI): rich would assume 80 columns and cut table cells
#: to "..." or wrap them into unreadable columns; a log has no edge, so tables get the room they need.
LOG_WIDTH = 200


def _width(stream: object) -> int | None:
    """None (rich measures the terminal) on a terminal; otherwise COLUMNS when set wider, else LOG_WIDTH."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return None
    return max(LOG_WIDTH, int(os.environ.get("COLUMNS") or 0))


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))


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
