"""The log cleaner (riverbed.log.cleaner) and its crash-safe swap (riverbed.log.swap)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverbed.log import (
    CleanerSettings,
    InvalidRecordError,
    Log,
    SimpleRecord,
    TimestampType,
    TopicConfig,
    build_batch,
    clean,
    decode_records,
    install,
    iter_batches,
    plan_cleaning,
    swap,
)
from riverbed.log.batch import Compression
from tests.support.log_files import FakeClock, crash, read_all, table_of

Table = dict[bytes, bytes]
Change = tuple[bytes, bytes | None]
SETTINGS = CleanerSettings()


def _config(**overrides: Any) -> TopicConfig:
    base: dict[str, Any] = {
        "segment_bytes": 400,
        "cleanup_policy": "compact",
        "min_cleanable_dirty_ratio": 0.01,
        "delete_retention_ms": 1000,
    }
    return TopicConfig(**{**base, **overrides})


def _open(directory: Path, clock: FakeClock, **overrides: Any) -> Log:
    return Log.open(directory, config=_config(**overrides), clock=clock)


def _batch(changes: list[Change], timestamp_ms: int, **kwargs: Any) -> bytes:
    records = [SimpleRecord(key=k, value=v, timestamp_ms=timestamp_ms) for k, v in changes]
    return build_batch(records, **kwargs)


def _records(log: Log) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every data record from the log start."""
    data = read_all(log)
    found = []
    for pos, header in iter_batches(data):
        if header.is_control:
            continue
        for record in decode_records(data[pos : pos + header.size]):
            found.append((record.offset, record.key, record.value, record.timestamp))
    return found


def _table(log: Log) -> Table:
    return table_of((key, value) for _, key, value, _ in _records(log))


def _clean_now(log: Log, clock: FakeClock) -> bool:
    """One cleaning if the log needs one (plan, clean, install); whether it ran."""
    log.roll()
    log.flush()  # the cleaner only touches segments below the recovery point
    job = plan_cleaning(log, now_ms=clock.now_ms, settings=SETTINGS)
    if job is None:
        return False
    assert install(log, clean(job))
    return True


def _write(log: Log, changes: list[Change], clock: FakeClock, *, per_batch: int = 3) -> Table:
    """Append ``changes`` in batches; the table they describe."""
    for i in range(0, len(changes), per_batch):
        log.append(_batch(changes[i : i + per_batch], clock.now_ms))
    return table_of(changes)


def _random_changes(rng: random.Random, count: int, keys: int) -> list[Change]:
    changes: list[Change] = []
    for i in range(count):
        key = b"key-%d" % rng.randrange(keys)
        changes.append((key, None if rng.random() < 0.15 else b"value-%d" % i))
    return changes


def test_compaction_keeps_the_latest_value_of_every_key_at_its_offset(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _open(tmp_path, clock)
    table = _write(log, _random_changes(random.Random(7), 600, keys=40), clock)
    before = {offset: (key, value) for offset, key, value, _ in _records(log)}
    assert _clean_now(log, clock)
    after = _records(log)
    assert _table(log) == table
    assert len(after) < len(before) / 4
    for offset, key, value, _ in after:  # offsets unchanged: the same record at each
        assert before[offset] == (key, value)
    keys = [key for _, key, _, _ in after]
    assert len(keys) == len(set(keys))  # one record per key: the latest
    assert any(value is None for _, _, value, _ in after)  # tombstones stay for now
    crash(log)
    reopened = _open(tmp_path, clock)
    assert _table(reopened) == table
    assert _records(reopened) == after
    reopened.close()


def test_tombstones_go_after_delete_retention_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _open(tmp_path, clock, delete_retention_ms=5000)
    table = _write(log, _random_changes(random.Random(3), 300, keys=20), clock)
    assert _clean_now(log, clock)
    assert any(value is None for _, _, value, _ in _records(log))
    clock.now_ms += 4999
    assert not _clean_now(log, clock)  # nothing dirty, horizon not reached
    clock.now_ms += 1
    assert _clean_now(log, clock)  # the horizon alone makes the log due
    records = _records(log)
    assert all(value is not None for _, _, value, _ in records)
    assert _table(log) == table
    assert len(records) == len(table)
    log.close()


def test_timestamps_survive_the_delete_horizon_stamp(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _open(tmp_path, clock)
    log.append(
        build_batch(
            [
                SimpleRecord(key=b"a", value=None, timestamp_ms=1111),
                SimpleRecord(key=b"b", value=b"x", timestamp_ms=2222),
            ]
        )
    )
    assert _clean_now(log, clock)
    data = read_all(log)
    (_, header), *_ = iter_batches(data)
    assert header.has_delete_horizon
    assert header.base_timestamp == clock.now_ms + 1000
    assert [(r.key, r.timestamp) for r in decode_records(data)] == [(b"a", 1111), (b"b", 2222)]
    assert header.max_timestamp == 2222
    log.close()


def test_records_without_a_key_are_dropped(tmp_path: Path) -> None:
    """Written before the topic became compacted (produce refuses them in a compacted log)."""
    clock = FakeClock()
    log = _open(tmp_path, clock, cleanup_policy="delete")
    log.append(_batch([(b"a", b"1")], clock.now_ms))
    log.append(build_batch([SimpleRecord(key=None, value=b"keyless")]))
    log.config = _config()
    assert _clean_now(log, clock)
    assert [(k, v) for _, k, v, _ in _records(log)] == [(b"a", b"1")]
    log.close()


def test_aborted_data_and_spent_markers_go_committed_data_stays(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _open(tmp_path, clock)
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    log.append(_batch([(b"a", b"committed")], clock.now_ms, base_sequence=0, **txn))
    log.append_marker(producer_id=7, producer_epoch=0, commit=True)
    log.append(_batch([(b"b", b"aborted")], clock.now_ms, base_sequence=1, **txn))
    log.append_marker(producer_id=7, producer_epoch=0, commit=False)
    log.append(_batch([(b"c", b"plain")], clock.now_ms))
    assert _clean_now(log, clock)
    assert [(k, v) for _, k, v, _ in _records(log)] == [(b"a", b"committed"), (b"c", b"plain")]
    markers = [h for _, h in iter_batches(read_all(log)) if h.is_control]
    assert len(markers) == 2  # kept until the horizon; the commit one for its data anyway
    assert log.aborted_transactions(0, log.log_end_offset)  # still indexed with its marker
    clock.now_ms += 1000
    log.append(_batch([(b"a", b"newer")], clock.now_ms))  # the committed record is superseded
    assert _clean_now(log, clock)
    clock.now_ms += 1000
    assert _clean_now(log, clock)
    assert not [h for _, h in iter_batches(read_all(log)) if h.is_control]
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert _table(log) == {b"a": b"newer", b"c": b"plain"}
    log.close()


def test_open_transactions_and_young_records_are_not_cleaned(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _open(tmp_path, clock, min_compaction_lag_ms=60_000)
    _write(log, [(b"a", b"%d" % i) for i in range(30)], clock)
    log.roll()
    log.flush()
    assert plan_cleaning(log, now_ms=clock.now_ms, settings=SETTINGS) is None  # too young
    clock.now_ms += 60_001
    log.append(
        _batch(
            [(b"b", b"open")],
            clock.now_ms,
            producer_id=9,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    )
    lso = log.last_stable_offset
    _write(log, [(b"a", b"late-%d" % i) for i in range(30)], clock)
    assert _clean_now(log, clock)
    cleaned_below = [s for s in log.segments if s.base_offset < lso]
    assert cleaned_below
    assert [v for _, k, v, _ in _records(log) if k == b"a" and v is not None][-1] == b"late-29"
    assert sum(1 for _, k, _, o in _records(log) if k == b"a") > 1  # above the LSO: untouched
    log.close()


def _cleaning_to_install(directory: Path, changes: list[Change]) -> tuple[Log, Any, Table]:
    clock = FakeClock()
    log = _open(directory, clock, segment_bytes=500)
    table = _write(log, changes, clock)
    log.roll()
    log.flush()
    job = plan_cleaning(log, now_ms=clock.now_ms, settings=SETTINGS)
    assert job is not None
    return log, clean(job), table


def test_a_crash_at_any_step_of_the_swap_leaves_a_correct_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill -9 (simulated by stopping at the n-th file operation of the install, with
    what was written left in place) at every step: the reopened log holds either the old
    segments or the cleaned ones, with the same table either way."""
    changes = _random_changes(random.Random(11), 150, keys=12)
    reference, result, table = _cleaning_to_install(tmp_path / "reference", changes)
    original = _records(reference)
    assert len(result.groups) > 1
    assert install(reference, result)
    cleaned = _records(reference)
    reference.close()
    # Groups are installed one after the other: the first k new, the rest old.
    bounds = [g.replaces[0] for g in result.groups] + [2**63]
    valid = [
        [r for r in cleaned if r[0] < bounds[k]] + [r for r in original if r[0] >= bounds[k]]
        for k in range(len(bounds))
    ]
    step = 0
    seen = set()
    while True:
        directory = tmp_path / f"run-{step}"
        log, result, _ = _cleaning_to_install(directory, changes)
        with monkeypatch.context() as patch:
            _stop_at_file_operation(patch, step)
            try:
                install(log, result)
                finished = True
            except _Killed:
                finished = False
        crash(log)
        reopened = _open(directory, FakeClock(), segment_bytes=500)
        assert _table(reopened) == table, f"killed at step {step}"
        records = _records(reopened)
        assert records in valid, f"killed at step {step}"
        seen.add(valid.index(records))
        assert not list(directory.glob("*.cleaned"))
        assert not (directory / swap.SWAP_FILE).exists()
        reopened.close()
        if finished:
            break
        step += 1
    assert step > 5  # the install has that many steps to be killed in
    assert seen == set(range(len(bounds)))  # every state, from all old to all new


class _Killed(BaseException):
    pass


def _stop_at_file_operation(patch: pytest.MonkeyPatch, stop_at: int) -> None:
    """Make the install's file operation number ``stop_at`` (rename, replace, unlink,
    atomic write) kill it, leaving on disk what a kill -9 would."""
    calls = {"n": 0}

    def counting(real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if calls["n"] == stop_at:
                raise _Killed
            calls["n"] += 1
            return real(*args, **kwargs)

        return wrapped

    patch.setattr(swap.os, "rename", counting(os.rename))
    patch.setattr(swap.os, "replace", counting(os.replace))
    patch.setattr(swap, "write_atomically", counting(swap.write_atomically))
    patch.setattr(Path, "unlink", counting(Path.unlink))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.integers(0, 12), st.booleans(), st.integers(1, 4)), min_size=1, max_size=80
    ),
    st.integers(120, 900),
    st.lists(st.integers(0, 79), max_size=4),
)
def test_cleaning_at_random_points_never_changes_the_table(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[int, bool, int]],
    segment_bytes: int,
    clean_points: list[int],
) -> None:
    directory = tmp_path_factory.mktemp("log")
    clock = FakeClock()
    log = _open(directory, clock, segment_bytes=segment_bytes)
    written: list[Change] = []
    originals: dict[int, tuple[bytes | None, bytes | None]] = {}
    for i, (key_id, delete, count) in enumerate(ops):
        changes: list[Change] = []
        for j in range(count):
            key = b"k%d" % ((key_id + j) % 13)
            changes.append((key, None if delete and j == 0 else b"v%d.%d" % (i, j)))
        result = log.append(_batch(changes, clock.now_ms))
        for j, change in enumerate(changes):
            originals[result.base_offset + j] = change
        written += changes
        if i in clean_points:
            clock.now_ms += 600
            _clean_now(log, clock)
            assert _table(log) == table_of(written)
    clock.now_ms += 600
    _clean_now(log, clock)
    for offset, key, value, _ in _records(log):
        assert originals[offset] == (key, value)
    model = table_of(written)
    assert _table(log) == model
    crash(log)
    reopened = _open(directory, clock, segment_bytes=segment_bytes)
    assert _table(reopened) == model
    reopened.close()


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("timestamp_type", list(TimestampType))
def test_rewritten_batches_keep_codec_timestamps_and_producer_fields(
    tmp_path: Path, compression: Compression, timestamp_type: TimestampType
) -> None:
    clock = FakeClock()
    log = _open(tmp_path, clock)
    records = [
        SimpleRecord(
            key=b"k%d" % (i % 3), value=None if i == 4 else b"v%d" % i, timestamp_ms=100 + i
        )
        for i in range(6)
    ]
    log.append(
        build_batch(
            records,
            compression=compression,
            timestamp_type=timestamp_type,
            producer_id=3,
            producer_epoch=1,
            base_sequence=0,
        )
    )
    before = decode_records(read_all(log))
    assert _clean_now(log, clock)
    data = read_all(log)
    (_, header), *_ = iter_batches(data)
    assert header.compression is compression
    assert header.timestamp_type is timestamp_type
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (3, 1, 0)
    assert (header.base_offset, header.last_offset_delta) == (0, 5)  # offsets kept
    after = decode_records(data)
    assert [(r.offset, r.key, r.value) for r in after] == [
        (3, b"k0", b"v3"),
        (4, b"k1", None),
        (5, b"k2", b"v5"),
    ]
    by_offset = {r.offset: r.timestamp for r in before}
    assert all(r.timestamp == by_offset[r.offset] for r in after)
    log.close()


def test_a_compacted_log_refuses_records_without_a_key(tmp_path: Path) -> None:
    log = _open(tmp_path, FakeClock())
    with pytest.raises(InvalidRecordError, match="without a key"):
        log.append(build_batch([SimpleRecord(key=b"a", value=b"1"), SimpleRecord(value=b"2")]))
    assert log.log_end_offset == 0
    log.close()


def test_a_read_from_any_offset_of_a_compacted_log_starts_at_the_next_kept_record(
    tmp_path: Path,
) -> None:
    """Consumers resume at offsets the cleaner removed (a committed offset, a position):
    the read must go on from the next record kept, across segment ends and empty spans. (The
    first batch may end with removed records, below the offset: batches keep their offset
    range, and clients skip what is below their position, as with Kafka.)"""
    clock = FakeClock()
    log = _open(tmp_path, clock, segment_bytes=300)
    _write(log, _random_changes(random.Random(5), 300, keys=8), clock, per_batch=2)
    assert _clean_now(log, clock)
    kept = [offset for offset, *_ in _records(log)]
    assert len(kept) < 30
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, max_bytes=1 << 20)
        offsets = [
            r.offset for pos, h in iter_batches(data) for r in decode_records(data[pos:][: h.size])
        ]
        following = [o for o in kept if o >= offset]
        if following:
            assert next((o for o in offsets if o >= offset), None) == following[0], offset
        else:
            assert not [o for o in offsets if o >= offset]
    log.close()
