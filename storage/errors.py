"""Errors the lake raises. Each message is one line that says what to do; the CLI prints it without a traceback."""


class LakeError(RuntimeError):
    """A lake that cannot be used as asked: not a lake, unreachable, written by a newer version, unknown scheme."""


class SchemaError(LakeError, ValueError):
    """A batch that does not match its table's schema; the message names the column. Nothing was written."""
