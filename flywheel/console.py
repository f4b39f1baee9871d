"""Shared rich consoles and the one-line error exit used by every command."""

from __future__ import annotations

import sys
from typing import NoReturn

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on one line to stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)
