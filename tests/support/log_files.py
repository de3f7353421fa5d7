"""Builders and oracles of the log tests: batches, logs on a fake clock, a kill -9, and what a
log's batches say (its table, its transactions)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from riverbed.log import (
    ABORT,
    AbortedTxn,
    Log,
    SimpleRecord,
    TopicConfig,
    build_batch,
    control_type,
    iter_batches,
)
from riverbed.testing.topic_reader import last_values


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
    return Log.open(directory, config=TopicConfig(**config), clock=clock or FakeClock())


def table_of(changes: Iterable[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """The table a changelog of ``(key, value)`` describes, which compaction must keep: the
    last value of every key, a tombstone (None) removing it. Every change has a key (a
    compacted topic refuses records without one)."""

    def key_of(key: bytes | None) -> bytes:
        assert key is not None
        return key

    return last_values((key_of(key), value) for key, value in changes)


def offsets_in(data: bytes) -> list[int]:
    """Base offsets of the whole batches in ``data``; asserts there is no partial tail."""
    found = list(iter_batches(data))
    assert sum(h.size for _, h in found) == len(data)
    return [h.base_offset for _, h in found]


def read_all(log: Log) -> bytes:
    return log.read(log.log_start_offset, max_bytes=1 << 40)


def crash(log: Log) -> None:
    """A kill -9: every file descriptor closed, nothing flushed, indexed or marked clean
    (what was written stays, as in the page cache of a killed process)."""
    log.delete_files_later()


def txn_state_of(data: bytes) -> tuple[dict[int, int], list[AbortedTxn]]:
    """The ongoing transactions and the aborted ones (with the LSO after each abort) that
    the batches in ``data`` (a whole log, from offset 0) describe: the oracle of the
    transaction tests, independent of producer state and txn indexes."""
    ongoing: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    for pos, header in iter_batches(data):
        if header.producer_id < 0:
            continue
        if header.is_control:
            first = ongoing.pop(header.producer_id, None)
            if first is not None and control_type(data[pos : pos + header.size]) == ABORT:
                lso = min(ongoing.values(), default=header.base_offset + 1)
                aborted.append(
                    AbortedTxn(
                        producer_id=header.producer_id,
                        first_offset=first,
                        last_offset=header.base_offset,
                        last_stable_offset=lso,
                    )
                )
        elif header.is_transactional:
            ongoing.setdefault(header.producer_id, header.base_offset)
    return ongoing, aborted


def overlapping(aborted: list[AbortedTxn], start: int, upper: int) -> list[AbortedTxn]:
    """What Log.aborted_transactions(start, upper) must answer, by brute force."""
    found = [t for t in aborted if t.last_offset >= start and t.first_offset < upper]
    return sorted(found, key=lambda t: t.first_offset)
