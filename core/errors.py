"""The one base for errors about bad input: a fixed `code` (the quarantine error_type and the reason people see),
a one-line message, and a `locator` saying where (a file, a line, a member). Readers raise a subclass; whoever
lands or prints the input catches `InputError` and never needs to guess the attributes."""

from __future__ import annotations


class InputError(ValueError):
    """Input that cannot be used as it is; the batch goes on without it (quarantined with `code`)."""

    def __init__(self, code: str, message: str, locator: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.locator = locator

    def one_line(self) -> str:
        return f"{self.code}: {' '.join(self.message.split())}" + (f" ({self.locator})" if self.locator else "")
