"""Crash and corruption: damage the files on purpose, reopen, check what is served."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from riverbed.log import iter_batches
from riverbed.log.batch import validate_batch
from tests.support.log_files import batch, offsets_in, open_log, read_all

SEGMENT = "00000000000000000000"


def _assert_all_valid(data: bytes) -> list[int]:
    offsets = offsets_in(data)
    for pos, header in iter_batches(data):
        validate_batch(data[pos : pos + header.size])
    assert offsets == sorted(offsets)
    return offsets


def _written_log(directory: Path, batches: int = 6) -> tuple[list[bytes], int]:
    log = open_log(directory)
    sent = [batch(3, tag=i) for i in range(batches)]
    for b in sent:
        log.append(b)
    log.flush()
    size = log.segments[-1].size
    log.segments[-1].close()  # a crash: no close(), no clean-shutdown marker
    return sent, size


def test_truncation_at_every_byte_of_the_last_batch(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    sent, size = _written_log(directory)
    last_size = len(sent[-1])
    original = (directory / f"{SEGMENT}.log").read_bytes()
    for cut in range(size - last_size, size):
        (directory / f"{SEGMENT}.log").write_bytes(original[:cut])
        log = open_log(directory)
        assert log.log_end_offset == 15
        assert _assert_all_valid(read_all(log)) == [0, 3, 6, 9, 12]
        assert log.append(batch(1, tag=99)).base_offset == 15
        assert _assert_all_valid(read_all(log)) == [0, 3, 6, 9, 12, 15]
        log.segments[-1].close()
    # and the untouched file recovers all of it
    (directory / f"{SEGMENT}.log").write_bytes(original)
    assert open_log(directory).log_end_offset == 18


def test_garbage_appended_is_cut_off(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _, size = _written_log(directory)
    with open(directory / f"{SEGMENT}.log", "ab") as f:
        f.write(os.urandom(1000))
    log = open_log(directory)
    assert log.log_end_offset == 18
    assert log.segments[-1].size == size
    assert log.append(batch(1)).base_offset == 18


@pytest.mark.parametrize("where", ["crc", "length", "base_offset", "magic"])
def test_damage_in_the_middle_truncates_there(tmp_path: Path, where: str) -> None:
    directory = tmp_path / "t-0"
    sent, _ = _written_log(directory)
    path = directory / f"{SEGMENT}.log"
    data = bytearray(path.read_bytes())
    third = sum(len(b) for b in sent[:3])  # batch at offset 9
    field = {"crc": third + 70, "length": third + 10, "base_offset": third + 7, "magic": third + 16}
    data[field[where]] ^= 0x11
    path.write_bytes(bytes(data))
    log = open_log(directory)
    assert log.log_end_offset == 9
    assert _assert_all_valid(read_all(log)) == [0, 3, 6]
    assert log.append(batch(2)).base_offset == 9


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate"])
def test_damaged_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=600, index_interval_bytes=0)
    for i in range(30):
        log.append(batch(2, tag=i, timestamp_ms=1000 * i))
    before = read_all(log)
    log.close()
    indexes = sorted(directory.glob("*.index")) + sorted(directory.glob("*.timeindex"))
    assert len(indexes) > 4
    for path in indexes:
        if damage == "delete":
            path.unlink()
        elif damage == "garbage":
            path.write_bytes(os.urandom(path.stat().st_size or 16))
        else:
            path.write_bytes(path.read_bytes()[:-3])
    log = open_log(directory, segment_bytes=600, index_interval_bytes=0)
    assert read_all(log) == before
    for offset in range(60):
        assert offsets_in(log.read(offset, max_bytes=1))[0] == offset - offset % 2
    assert log.offset_for_timestamp(5000) == (10, 5000)


def test_open_does_not_read_old_segments(tmp_path: Path) -> None:
    """Start-up cost is the tail only: an old segment's bytes are never looked at."""
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=400)
    for i in range(40):
        log.append(batch(2, tag=i))
    log.flush()
    assert len(log.segments) > 5
    log.segments[-1].close()  # crash
    old = directory / f"{SEGMENT}.log"
    data = bytearray(old.read_bytes())
    data[100] ^= 0xFF  # would fail the CRC if it were scanned
    old.write_bytes(bytes(data))
    reopened = open_log(directory, segment_bytes=400)
    assert reopened.log_end_offset == 80  # nothing truncated: segment 0 was not scanned
    assert old.stat().st_size == len(data)
    assert reopened.segments[0]._fd is None  # not even opened


def test_recovery_scans_unflushed_rolled_segments(tmp_path: Path) -> None:
    """Segments rolled after the last flush are below no recovery point: they are scanned,
    and damage in them truncates there and drops every later segment."""
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=400)
    for i in range(5):
        log.append(batch(2, tag=i))
    log.flush()
    for i in range(5, 40):
        log.append(batch(2, tag=i))
    bases = [s.base_offset for s in log.segments]
    log.segments[-1].close()
    damaged = directory / f"{bases[3]:020d}.log"
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0xFF  # the last batch of segment 3
    damaged.write_bytes(bytes(data))
    reopened = open_log(directory, segment_bytes=400)
    assert [s.base_offset for s in reopened.segments] == bases[:4]
    assert _assert_all_valid(read_all(reopened))[-1] < bases[4]
    assert reopened.append(batch(1)).base_offset == reopened.log_end_offset - 1


CHILD = textwrap.dedent(
    """
    import os, sys
    sys.path[:0] = [sys.argv[2]]
    from tests.support.log_files import batch, open_log
    from pathlib import Path
    log = open_log(Path(sys.argv[1]), segment_bytes=20000)
    i = 0
    while True:
        log.append(batch(5, tag=i, value_bytes=200))
        i += 1
        if i % 7 == 0:
            flushed = log.flush()
            sys.stdout.write(f"{flushed}\\n")
            sys.stdout.flush()
    """
)


@pytest.mark.slow
def test_sigkill_mid_append_loses_nothing_flushed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    repository = str(Path(__file__).parents[2])  # where the tests package is
    for round_ in range(3):
        with subprocess.Popen(
            [sys.executable, "-c", CHILD, str(directory), repository],
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None
            flushed = 0
            for _ in range(20 + 13 * round_):
                flushed = int(child.stdout.readline())
            child.send_signal(signal.SIGKILL)
            child.wait()
        log = open_log(directory, segment_bytes=20000)
        offsets = _assert_all_valid(read_all(log))
        assert log.log_end_offset >= flushed
        assert offsets == list(range(0, log.log_end_offset, 5))
        log.close()
