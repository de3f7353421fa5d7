"""SIGTERM and SIGINT as a request to stop cleanly, for the commands that run until told."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

__all__ = ["StopSignals"]


class StopSignals:
    """While entered, SIGTERM and SIGINT set :meth:`requested` instead of ending the process
    (the old handlers come back on exit)."""

    def __init__(self) -> None:
        self._requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True

    def requested(self) -> bool:
        return self._requested
