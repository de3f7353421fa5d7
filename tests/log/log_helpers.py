"""Shared builders for the log tests."""

from __future__ import annotations

from pathlib import Path

from riverbed.log.batch import iter_batches
from riverbed.log.config import LogConfig
from riverbed.log.log import Log
from riverbed.log.records import SimpleRecord, build_batch


class FakeClock:
    """An epoch-ms clock the test moves by hand."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def batch(
    n: int = 1, *, tag: int = 0, timestamp_ms: int = 1000, value_bytes: int = 10, **kwargs: int
) -> bytes:
    """A batch of ``n`` records whose values identify it (``tag``)."""
    records = [
        SimpleRecord(
            key=b"k%d" % i,
            value=(b"%d-%d-" % (tag, i)).ljust(value_bytes, b"x"),
            timestamp_ms=timestamp_ms + i,
        )
        for i in range(n)
    ]
    return build_batch(records, **kwargs)  # type: ignore[arg-type]


def open_log(directory: Path, clock: FakeClock | None = None, **config: int) -> Log:
    return Log.open(directory, config=LogConfig(**config), clock=clock or FakeClock())


def offsets_in(data: bytes) -> list[int]:
    """Base offsets of the whole batches in ``data``; asserts there is no partial tail."""
    found = list(iter_batches(data))
    assert sum(h.size for _, h in found) == len(data)
    return [h.base_offset for _, h in found]


def read_all(log: Log) -> bytes:
    return log.read(log.log_start_offset, max_bytes=1 << 40)
