"""The broker's fsync scheduling (riverbed.broker.flusher) on real logs: group commit for
acks=all, a round started for a transaction's data without waiting for it, and the commit
path's own fsyncs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from riverbed.broker.flusher import GroupFlusher
from riverbed.log import Log
from tests.support.log_files import batch, open_log


def dirty_log(path: Path, records: int = 3) -> Log:
    log = open_log(path)
    log.append(batch(records))
    assert log.flushed_offset < log.log_end_offset
    return log


def test_flushed_returns_once_the_logs_are_fsynced_and_starts_no_round_for_clean_ones(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        flusher = GroupFlusher()
        a, b = dirty_log(tmp_path / "a-0"), dirty_log(tmp_path / "b-0")
        await asyncio.gather(flusher.flushed([a]), flusher.flushed([a, b]))
        assert (a.flushed_offset, b.flushed_offset) == (a.log_end_offset, b.log_end_offset)
        await flusher.flushed([a, b])  # nothing new: no round
        assert flusher._running is None
        a.close()
        b.close()

    asyncio.run(scenario())


def test_soon_fsyncs_in_the_background_and_a_later_flushed_has_nothing_left(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        flusher = GroupFlusher()
        log = dirty_log(tmp_path / "t-0")
        flusher.soon([log])  # returns at once: a transactional produce is answered now
        assert log.flushed_offset < log.log_end_offset
        await flusher.close()  # the round it started
        assert log.flushed_offset == log.log_end_offset
        log.append(batch(2))
        flusher.soon([log])
        await flusher.flushed([log])  # what a commit waits for
        assert log.flushed_offset == log.log_end_offset == 5
        log.close()

    asyncio.run(scenario())


def test_now_fsyncs_without_waiting_for_the_round_in_progress(tmp_path: Path) -> None:
    async def scenario() -> None:
        flusher = GroupFlusher()
        busy, urgent = dirty_log(tmp_path / "busy-0"), dirty_log(tmp_path / "urgent-0")
        release = asyncio.Event()
        round_started = asyncio.Event()

        async def slow_round() -> None:  # a round in progress that does not end on its own
            round_started.set()
            await release.wait()

        flusher._running = asyncio.create_task(slow_round())
        await round_started.wait()
        await asyncio.wait_for(flusher.now([urgent]), timeout=10)
        assert urgent.flushed_offset == urgent.log_end_offset
        assert busy.flushed_offset < busy.log_end_offset
        release.set()
        await flusher.close()
        busy.close()
        urgent.close()

    asyncio.run(scenario())
