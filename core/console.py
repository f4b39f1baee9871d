"""Shared rich consoles, the one escaping helper for text that came from input, and the one-line error exit.

Rich reads `[...]` in printed strings as markup: a file name, a quarantine message, a SQL value or column name that
holds `[/x]` would raise MarkupError (ending the command), and `[red]` or `[link=...]` would style or spoof the output.
So every piece of input-derived text is passed through `esc` before it is put into a string Rich will render
(console.print, table cells and headers, progress descriptions, status lines). Emoji codes (`:warning:`) are off on
both consoles for the same reason."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import NoReturn

from rich.console import Console
from rich.table import Table

#: Width when output is not a terminal (a log file, a pipe, CI): rich would assume 80 columns and cut table cells
#: to "..." or wrap them into unreadable columns; a log has no edge, so tables get the room they need.
LOG_WIDTH = 200


def _width(stream: object) -> int | None:
    """None (rich measures the terminal) on a terminal; otherwise COLUMNS when set wider, else LOG_WIDTH."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return None
    return max(LOG_WIDTH, int(os.environ.get("COLUMNS") or 0))


console = Console(width=_width(sys.stdout), emoji=False)
err_console = Console(stderr=True, width=_width(sys.stderr), emoji=False)


#: A run of backslashes before a bracket that starts a tag, before any other bracket, or at the end of the text.
_BACKSLASHED = re.compile(r"(\\*)(?:(\[(?=[a-z#/@][^\[]*?\]))|(\[)|$)")


def _escape_run(m: re.Match[str]) -> str:
    bs, tag, bracket = m.group(1), m.group(2), m.group(3)
    if tag:  # Rich reads k backslashes before a tag as k // 2 of them, escaping the tag when k is odd
        return bs * 2 + "\\["
    if bracket:  # before any other bracket Rich drops one backslash (Rich 15)
        return bs + "\\[" if bs else "["
    return bs * 2  # at the end: they would escape the markup that follows


def esc(value: object) -> str:
    """`str(value)` with Rich markup escaped: prints as exactly that text, never as styling, never MarkupError.

    rich.markup.escape covers tags but not the backslashes Rich drops before other brackets (`\\[1` printed as
    `[1`); this also keeps those, and is property-tested against Rich's renderer (tests/hostile/test_markup.py)."""
    return _BACKSLASHED.sub(_escape_run, str(value))


def _cell(v: object) -> str:
    return "" if v is None else str(v)


def data_table(
    columns: Iterable[object],
    rows: Iterable[Iterable[object]],
    *,
    title: str | None = None,
    cell: Callable[[object], str] = _cell,
) -> Table:
    """A Rich table of data (query results, sessions, reports): headers and cells escaped, shown as plain text."""
    t = Table(*(esc(c) for c in columns), title=title)
    for row in rows:
        t.add_row(*(esc(cell(v)) for v in row))
    return t


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on one line to stderr and exit non-zero (newlines inside are folded)."""
    one_line = " ".join(str(message).split())
    err_console.print(f"[bold red]error:[/] {esc(one_line)}", highlight=False, soft_wrap=True)
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
