"""How a command-line process ends."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_code(e: SystemExit) -> int:
    """The status `sys.exit(x)` asks for: None is 0, an int is itself, anything else is printed (as Python does)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def leave(code: int) -> NoReturn:
    """End the process with `code` once Python's own shutdown work is done, without finalising the interpreter.

    Why: native libraries keep worker threads of their own (DuckDB, Arrow's pools, delta-rs' runtime). When one of
    them touches Python while the interpreter is being finalised, CPython ends that thread with pthread_exit, the
    unwind meets a C++ frame that may not throw, and the process aborts ("terminate called without an active
    exception", exit -6) after the command has done all its work and printed its result (duckdb/duckdb#13904,
    apache/arrow#34314). So the steps of a normal exit that matter are done here, in order: wait for non-daemon
    threads (as `threading` does at exit), run the atexit handlers (Prefect stops its server, logging flushes, temp
    folders go), flush stdout and stderr; then `os._exit`, as multiprocessing's children end.
    """
    try:
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed or replaced by a caller
                pass
        os._exit(code)
