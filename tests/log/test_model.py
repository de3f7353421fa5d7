"""Hypothesis: the log against an in-memory list of batches, across rolls and reopens."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.log import iter_batches
from tests.support.log_files import batch, offsets_in, open_log, read_all

appends = st.lists(
    st.tuples(st.integers(1, 6), st.integers(1, 300)),  # records, value bytes
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    appends=appends,
    segment_bytes=st.integers(200, 3000),
    index_interval_bytes=st.sampled_from([0, 100, 4096]),
    reads=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 3000)), max_size=15),
    reopen=st.sampled_from(["none", "clean", "crash"]),
)
def test_log_matches_a_list_of_batches(
    appends: list[tuple[int, int]],
    segment_bytes: int,
    index_interval_bytes: int,
    reads: list[tuple[int, int]],
    reopen: str,
) -> None:
    config = {"segment_bytes": segment_bytes, "index_interval_bytes": index_interval_bytes}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        log = open_log(directory, **config)
        model: list[tuple[int, int, bytes]] = []  # (base, last, stored bytes minus offset)
        for tag, (n, value_bytes) in enumerate(appends):
            sent = batch(n, tag=tag, value_bytes=value_bytes)
            result = log.append(sent)
            expected_base = model[-1][1] + 1 if model else 0
            assert result.base_offset == expected_base
            model.append((expected_base, expected_base + n - 1, sent[8:]))
        if reopen == "clean":
            log.close()
            log = open_log(directory, **config)
        elif reopen == "crash":
            log.flush()
            log.segments[-1].close()
            log = open_log(directory, **config)
        end = model[-1][1] + 1
        assert log.log_end_offset == end
        data = read_all(log)
        assert [(h.base_offset, data[p + 8 : p + h.size]) for p, h in iter_batches(data)] == [
            (base, body) for base, _, body in model
        ]
        for offset, max_bytes in reads:
            if offset > end:
                continue
            got = log.read(offset, max_bytes=max_bytes)
            if offset == end:
                assert got == b""
                continue
            first = next(i for i, (_, last, _) in enumerate(model) if last >= offset)
            expected, total = [], 0
            for base, _, body in model[first:]:
                if expected and total + len(body) + 8 > max_bytes:
                    break
                expected.append(base)
                total += len(body) + 8
            # whole batches only; the first one always; never more than max_bytes after it
            got_offsets = offsets_in(got)
            assert got_offsets == expected[: len(got_offsets)]
            assert got_offsets[0] == expected[0]
            assert len(got) <= max(max_bytes, len(model[first][2]) + 8)
        log.close()


def test_flush_from_a_thread_while_appending_and_rolling(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=2000)
    stop = threading.Event()
    flushed: list[int] = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                flushed.append(log.flush())
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(600):
            log.append(batch(3, tag=i, value_bytes=50))
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert flushed == sorted(flushed) and len(flushed) > 1
    assert log.flush() == 1800
    assert len(log.segments) > 20
    log.segments[-1].close()  # crash after the flush: everything must come back
    reopened = open_log(tmp_path / "t-0", segment_bytes=2000)
    assert offsets_in(read_all(reopened)) == list(range(0, 1800, 3))
