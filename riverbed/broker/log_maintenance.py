"""Retention and compaction on a running broker (Kafka's LogManager retention task and
LogCleaner thread).

- Every ``log.retention.check.interval.ms`` each partition log deletes the old segments its
  config allows (:func:`riverbed.log.retention.delete_old_segments`) and the ``*.deleted``
  files whose ``file.delete.delay.ms`` is over. This runs on the event loop: it is a few
  renames and, when the log start moves, one fsync.
- With ``log.cleaner.enable``, one cleaner: it picks a compacted log that needs cleaning
  (:func:`riverbed.log.cleaner.plan_cleaning`, on the loop), runs the cleaning itself in a
  child process (``python -m riverbed.log.cleaner_process``: the records are decoded in Python, and
  a thread would hold the GIL the event loop needs; a process uses the other core), then
  installs the result on the loop. It looks again at once after a cleaning, and after
  ``log.cleaner.backoff.ms`` when there was nothing to do. The child dies with the broker
  (PR_SET_PDEATHSIG) and is killed at shutdown; its unfinished ``.cleaned`` files are
  removed when the log is next opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import sys
from collections.abc import Callable

from riverbed.log import (
    CleanerSettings,
    CleaningJob,
    CleaningResult,
    Log,
    LogError,
    LogManager,
    delete_old_segments,
    install,
    plan_cleaning,
)

__all__ = ["LogMaintenance"]

log = logging.getLogger(__name__)


class LogMaintenance:
    """The retention and cleaner tasks of one broker (see the module docstring)."""

    def __init__(
        self,
        logs: LogManager,
        *,
        clock: Callable[[], int],
        retention_check_interval_ms: int,
        cleaner_enable: bool,
        cleaner_backoff_ms: int,
        cleaner: CleanerSettings,
        on_cleaned: Callable[[int], None] | None = None,
    ) -> None:
        """``on_cleaned``: given the bytes each cleaning installed freed (the log's
        segments before less after)."""
        self._logs = logs
        self._on_cleaned = on_cleaned
        self._clock = clock
        self._retention_interval_s = retention_check_interval_ms / 1000
        self._cleaner_enable = cleaner_enable
        self._backoff_s = cleaner_backoff_ms / 1000
        self._settings = cleaner
        self._tasks: list[asyncio.Task[None]] = []
        self._child: asyncio.subprocess.Process | None = None
        self.cleanings = 0
        """Cleanings installed since start (for tests and the log)."""

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        if self._cleaner_enable:
            self._tasks.append(asyncio.create_task(self._cleaner_loop()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._child is not None and self._child.returncode is None:
            self._child.kill()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    # --- retention ----------------------------------------------------------------------

    def check_retention(self) -> int:
        """One retention pass over every log; the number of segments deleted."""
        now_ms = self._clock()
        deleted = 0
        for (topic, partition), partition_log in self._logs.partition_logs():
            try:
                deleted += delete_old_segments(partition_log, now_ms=now_ms)
                partition_log.deleted_files.delete_expired(now_ms=now_ms)
            except (LogError, OSError) as e:
                log.error("retention of %s-%d failed: %s", topic, partition, e)
        return deleted

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self._retention_interval_s)
            deleted = self.check_retention()
            if deleted:
                log.info("retention deleted %d segments", deleted)

    # --- cleaning -----------------------------------------------------------------------

    async def clean_once(self) -> bool:
        """Clean the first log that needs it; whether one was cleaned."""
        now_ms = self._clock()
        for (topic, partition), partition_log in self._logs.partition_logs():
            try:
                job = plan_cleaning(partition_log, now_ms=now_ms, settings=self._settings)
            except (LogError, OSError) as e:
                log.error("cannot plan cleaning %s-%d: %s", topic, partition, e)
                continue
            if job is None:
                continue
            try:
                result = await self._run(job)
                before = _size(partition_log)
                installed = install(partition_log, result)
            except (LogError, OSError, CleanerFailed) as e:
                log.error("cleaning %s-%d failed: %s", topic, partition, e)
                continue
            if installed:
                self.cleanings += 1
                stats = result.stats
                if self._on_cleaned is not None:
                    self._on_cleaned(before - _size(partition_log))
                log.info(
                    "cleaned %s-%d: %d of %d records kept, %.1f MB read in %.2f s",
                    topic,
                    partition,
                    stats.records_kept,
                    stats.records_read,
                    stats.bytes_read / 1e6,
                    stats.seconds,
                )
            return True
        return False

    async def _cleaner_loop(self) -> None:
        while True:
            if not await self.clean_once():
                await asyncio.sleep(self._backoff_s)

    async def _run(self, job: CleaningJob) -> CleaningResult:
        """Step 2 of the cleaning in a child process (see the module docstring)."""
        self._child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "riverbed.log.cleaner_process",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await self._child.communicate(pickle.dumps(job))
        finally:
            if self._child.returncode is None:
                self._child.kill()
                await self._child.wait()
        if self._child.returncode != 0:
            message = err.decode(errors="replace").strip().splitlines()
            raise CleanerFailed(message[-1] if message else f"exit {self._child.returncode}")
        result = pickle.loads(out)
        if not isinstance(result, CleaningResult):
            raise CleanerFailed("the cleaner process answered something else")
        return result


def _size(partition_log: Log) -> int:
    return sum(segment.size for segment in partition_log.segments)


class CleanerFailed(Exception):
    """The cleaner process failed (a source segment vanished, a disk error, ...)."""
