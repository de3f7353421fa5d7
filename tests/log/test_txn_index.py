"""The .txnindex file: Kafka's byte layout, lazy loading, torn tails, the range search."""

from __future__ import annotations

import struct
from pathlib import Path

from riverbed.log import AbortedTxn
from riverbed.log.txn_index import TransactionIndex, collect_aborted


def _txn(producer_id: int, first: int, last: int, lso: int) -> AbortedTxn:
    return AbortedTxn(
        producer_id=producer_id, first_offset=first, last_offset=last, last_stable_offset=lso
    )


def test_entries_are_kafkas_34_bytes_and_load_back(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert not path.exists() and index.entries == []
    entries = [_txn(7, 0, 10, 3), _txn(8, 3, 12, 13)]
    for entry in entries:
        index.append(entry)
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 0, 10, 3) + struct.pack(
        ">hqqqq", 0, 8, 3, 12, 13
    )
    assert TransactionIndex(path).entries == entries


def test_nothing_is_read_before_first_use(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(path)
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 2, 3, 4))
    assert index.entries == [_txn(1, 2, 3, 4)]


def test_torn_tail_and_unknown_versions_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    good = struct.pack(">hqqqq", 0, 1, 2, 3, 4)
    for tail in (b"\x00", good[:33], struct.pack(">hqqqq", 5, 1, 2, 3, 4) + good):
        path.write_bytes(good + tail)
        index = TransactionIndex(path)
        assert index.entries == [_txn(1, 2, 3, 4)]
        index.append(_txn(9, 5, 6, 7))  # written over the damaged tail
        assert path.read_bytes() == good + struct.pack(">hqqqq", 0, 9, 5, 6, 7)


def test_reset_and_delete_remove_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(path)
    index.append(_txn(1, 2, 3, 4))
    index.fsync()
    index.reset()
    assert not path.exists() and index.entries == []
    index.fsync()  # no file: nothing to do
    index.append(_txn(1, 2, 3, 4))
    index.delete()
    assert not path.exists()


def test_collect_stops_where_no_later_abort_can_overlap(tmp_path: Path) -> None:
    first, second = (
        TransactionIndex(tmp_path / "1.txnindex"),
        TransactionIndex(tmp_path / "2.txnindex"),
    )
    first.append(_txn(1, 5, 20, 10))  # transaction 10.. was still open after this abort
    first.append(_txn(2, 10, 30, 31))
    second.append(_txn(3, 31, 40, 41))
    assert collect_aborted([first, second], start_offset=0, upper_bound_offset=100) == [
        _txn(1, 5, 20, 10),
        _txn(2, 10, 30, 31),
        _txn(3, 31, 40, 41),
    ]
    assert collect_aborted([first, second], start_offset=21, upper_bound_offset=25) == [
        _txn(2, 10, 30, 31)
    ]
    decoy = TransactionIndex(tmp_path / "3.txnindex")
    decoy.append(_txn(4, 1, 50, 51))  # impossible after LSO 31: proves it is not read
    found = collect_aborted([first, decoy], start_offset=0, upper_bound_offset=31)
    assert found == [_txn(1, 5, 20, 10), _txn(2, 10, 30, 31)]


def test_collect_orders_by_first_offset(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "x.txnindex")
    index.append(_txn(1, 8, 9, 2))  # marker order differs from first-offset order
    index.append(_txn(2, 2, 10, 11))
    assert [
        t.producer_id for t in collect_aborted([index], start_offset=0, upper_bound_offset=11)
    ] == [2, 1]
