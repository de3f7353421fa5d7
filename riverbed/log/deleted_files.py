"""The files of segments a log no longer holds: renamed ``*.deleted`` at once, removed later.

When retention or DeleteRecords (:mod:`riverbed.log.retention`) or a cleaning
(:mod:`riverbed.log.swap`) takes segments out of a log, each of their files is renamed
``<name>.deleted`` and removed ``file.delete.delay.ms`` later (Kafka's
``log.segment.delete.delay.ms``, one minute by default). A fetch being sent holds its own
descriptors (see :class:`~riverbed.log.file_records.FileRecords`), so the delay is Kafka's
courtesy to tools reading the files, not a need.

After a crash nothing is lost by forgetting the schedule: the rename already took the files
out of the log, and the loader removes every ``*.deleted`` file it finds at open
(:mod:`riverbed.log.loader`).

Threads: the event loop only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

DELETED_SUFFIX = ".deleted"


def rename_to_deleted(paths: Iterable[Path]) -> list[Path]:
    """Rename each existing file to ``<name>.deleted``; the new names."""
    renamed = []
    for path in paths:
        target = path.with_name(path.name + DELETED_SUFFIX)
        try:
            os.rename(path, target)
        except FileNotFoundError:
            continue
        renamed.append(target)
    return renamed


class DeletedFiles:
    """One log's ``*.deleted`` files and when each may be removed."""

    def __init__(self) -> None:
        self._due: list[tuple[int, list[Path]]] = []  # (remove at ms, files)

    def add(self, paths: list[Path], *, now_ms: int, delay_ms: int) -> None:
        """Remove ``paths`` ``delay_ms`` after ``now_ms``; then remove what is due by
        ``now_ms`` (so with no delay, these at once)."""
        if paths:
            self._due.append((now_ms + delay_ms, paths))
            self.delete_expired(now_ms=now_ms)

    def delete_expired(self, *, now_ms: int) -> None:
        """Remove the files whose delay is over by ``now_ms``."""
        due = [paths for at_ms, paths in self._due if at_ms <= now_ms]
        self._due = [(at_ms, paths) for at_ms, paths in self._due if at_ms > now_ms]
        for paths in due:
            for path in paths:
                path.unlink(missing_ok=True)
