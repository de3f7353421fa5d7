"""The CLI's one exception: a user-facing failure, printed as one line."""

from __future__ import annotations


class CliError(Exception):
    """Printed as ``riverbed COMMAND: message``; the process exits with ``exit_code``."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
