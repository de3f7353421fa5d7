"""Transactions on the wire: every error path a client library would smooth over, the
last stable offset and aborted list in Fetch, ListOffsets under read_committed, pending
transactional offsets, and the admin APIs DescribeTransactions and ListTransactions."""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v1.request import (
    AddPartitionsToTxnRequest as AddPartitionsV1,
)
from kio.schema.add_partitions_to_txn.v1.request import (
    AddPartitionsToTxnTopic as TopicV1,
)
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v1.request import EndTxnRequest as EndTxnV1
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from riverbed.broker import Broker
from riverbed.log import (
    Log,
    LogManager,
    Record,
    SimpleRecord,
    TopicConfig,
    build_batch,
    decode_records,
    iter_batches,
)
from tests.support.brokers import BrokerProcess, create_topic
from tests.support.wire import WireClient

PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FETCH, INIT_PID = 0, 1, 2, 9, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_TXNS, LIST_TXNS = 65, 66
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def decode_all(records: bytes) -> list[Record]:
    """The data records of a Fetch answer (control batches skipped, as clients do)."""
    return [
        record
        for position, header in iter_batches(records)
        if not header.is_control
        for record in decode_records(records[position : position + header.size])
    ]


def init_pid(client: WireClient, txn_id: str, *, timeout_ms: int = 60_000) -> Any:
    body = InitProducerIdRequest(
        transactional_id=txn_id,
        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=-1,
        producer_epoch=-1,
    )
    return client.request(INIT_PID, 4, body)


def add_partitions(
    client: WireClient, txn_id: str, pid: int, epoch: int, topics: dict[str, list[int]]
) -> dict[tuple[str, int], ErrorCode]:
    body = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=tuple(
            AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()
        ),
    )
    response = client.request(ADD_PARTITIONS, 3, body)
    return {
        (topic.name, p.partition_index): p.partition_error_code
        for topic in response.results_by_topic_v3_and_below
        for p in topic.results_by_partition
    }


def end_txn(client: WireClient, txn_id: str, pid: int, epoch: int, *, commit: bool) -> ErrorCode:
    body = EndTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return client.request(END_TXN, 3, body).error_code  # type: ignore[no-any-return]


def produce_txn(
    client: WireClient, txn_id: str | None, pid: int, epoch: int, seq: int, *values: bytes
) -> Any:
    batch = build_batch(
        [SimpleRecord(value=v, timestamp_ms=1_767_225_600_000) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    body = ProduceRequest(
        transactional_id=txn_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name="t", partition_data=(PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    return client.request(PRODUCE, 9, body).responses[0].partition_responses[0]


def open_transaction(client: WireClient, txn_id: str, value: bytes) -> tuple[int, int]:
    """A new producer of ``txn_id`` with ``value`` written to t-0 in its open transaction;
    its producer id and epoch."""
    init = init_pid(client, txn_id)
    pid, epoch = init.producer_id, init.producer_epoch
    assert add_partitions(client, txn_id, pid, epoch, {"t": [0]}) == {("t", 0): ErrorCode.none}
    assert produce_txn(client, txn_id, pid, epoch, 0, value).error_code == ErrorCode.none
    return pid, epoch


def fetch(client: WireClient, *, isolation: int, offset: int = 0) -> Any:
    body = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=0,
        isolation_level=isolation,
        topics=(
            FetchTopic(
                topic="t",
                partitions=(
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return client.request(FETCH, 12, body).responses[0].partitions[0]


def latest_offset(client: WireClient, *, isolation: int) -> int:
    body = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=(
            ListOffsetsTopic(
                name="t", partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)
            ),
        ),
    )
    return client.request(LIST_OFFSETS, 5, body).topics[0].partitions[0].offset  # type: ignore[no-any-return]


def describe(client: WireClient, *txn_ids: str) -> Any:
    body = DescribeTransactionsRequest(transactional_ids=txn_ids)
    return client.request(DESCRIBE_TXNS, 0, body).transaction_states


def test_a_transaction_step_by_step_on_the_wire(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "t", partitions=1)
    with WireClient(bootstrap) as client:
        assert init_pid(client, "w", timeout_ms=900_001).error_code == (
            ErrorCode.invalid_transaction_timeout
        )
        first = init_pid(client, "w")
        assert first.error_code == ErrorCode.none
        pid, epoch = first.producer_id, first.producer_epoch
        assert epoch == 0

        # Writing before the partition is in the transaction is refused (KIP-890).
        assert produce_txn(client, "w", pid, epoch, 0, b"early").error_code == (
            ErrorCode.invalid_txn_state
        )
        # A transactional batch without a transactional id is refused too.
        assert produce_txn(client, None, pid, epoch, 0, b"anon").error_code == (
            ErrorCode.invalid_record
        )
        assert add_partitions(client, "w", pid, epoch, {"t": [0], "nope": [0]}) == {
            ("t", 0): ErrorCode.operation_not_attempted,
            ("nope", 0): ErrorCode.unknown_topic_or_partition,
        }
        assert add_partitions(client, "w", pid, epoch, {"t": [0]}) == {("t", 0): ErrorCode.none}
        written = produce_txn(client, "w", pid, epoch, 0, b"a", b"b")
        assert (written.error_code, written.base_offset) == (ErrorCode.none, 0)

        (state,) = describe(client, "w")
        assert state.error_code == ErrorCode.none
        assert state.transaction_state == "Ongoing"
        assert (state.producer_id, state.producer_epoch) == (pid, epoch)
        assert state.transaction_timeout == datetime.timedelta(seconds=60)
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [("t", [0])]

        # read_committed stops at the open transaction; read_uncommitted reads it.
        committed = fetch(client, isolation=READ_COMMITTED)
        assert (committed.high_watermark, committed.last_stable_offset) == (2, 0)
        assert not committed.records
        assert list(committed.aborted_transactions) == []
        uncommitted = fetch(client, isolation=READ_UNCOMMITTED)
        assert uncommitted.records and uncommitted.aborted_transactions is None
        assert latest_offset(client, isolation=READ_COMMITTED) == 0
        assert latest_offset(client, isolation=READ_UNCOMMITTED) == 2

        assert end_txn(client, "w", pid, epoch, commit=True) == ErrorCode.none
        assert end_txn(client, "w", pid, epoch, commit=True) == ErrorCode.none  # a retry
        assert end_txn(client, "w", pid, epoch, commit=False) == ErrorCode.invalid_txn_state
        committed = fetch(client, isolation=READ_COMMITTED)
        assert (committed.high_watermark, committed.last_stable_offset) == (3, 3)  # + marker
        assert latest_offset(client, isolation=READ_COMMITTED) == 3
        (state,) = describe(client, "w")
        assert (state.transaction_state, list(state.topics)) == ("CompleteCommit", [])

        # A second transaction is aborted: Fetch lists it for read_committed readers.
        assert add_partitions(client, "w", pid, epoch, {"t": [0]}) == {("t", 0): ErrorCode.none}
        assert produce_txn(client, "w", pid, epoch, 2, b"c").base_offset == 3
        assert end_txn(client, "w", pid, epoch, commit=False) == ErrorCode.none
        committed = fetch(client, isolation=READ_COMMITTED)
        assert committed.last_stable_offset == 5
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
            (pid, 3)
        ]
        # A fetch that starts after the aborted transaction does not get it.
        assert list(fetch(client, isolation=READ_COMMITTED, offset=5).aborted_transactions) == []
        assert end_txn(client, "w", pid, epoch, commit=True) == ErrorCode.invalid_txn_state


def test_fencing_errors_follow_the_request_version(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "t", partitions=1)
    with WireClient(bootstrap) as client:
        pid, _ = open_transaction(client, "f", b"zombie")

        new = init_pid(client, "f")  # fences epoch 0 and aborts its transaction
        assert (new.error_code, new.producer_id, new.producer_epoch) == (ErrorCode.none, pid, 1)
        aborted = fetch(client, isolation=READ_COMMITTED)
        assert [(a.producer_id, a.first_offset) for a in aborted.aborted_transactions] == [(pid, 0)]
        assert aborted.last_stable_offset == aborted.high_watermark == 2

        # The zombie (epoch 0): PRODUCER_FENCED for new clients, INVALID_PRODUCER_EPOCH for
        # clients older than KIP-588; its data is refused by the partition and the coordinator.
        assert add_partitions(client, "f", pid, 0, {"t": [0]}) == {
            ("t", 0): ErrorCode.producer_fenced
        }
        body = AddPartitionsV1(
            v3_and_below_transactional_id="f",
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=(TopicV1(name="t", partitions=(0,)),),
        )
        v1 = client.request(ADD_PARTITIONS, 1, body).results_by_topic_v3_and_below
        assert v1[0].results_by_partition[0].partition_error_code == (
            ErrorCode.invalid_producer_epoch
        )
        body_v1 = EndTxnV1(transactional_id="f", producer_id=pid, producer_epoch=0, committed=True)
        assert client.request(END_TXN, 1, body_v1).error_code == ErrorCode.invalid_producer_epoch
        assert end_txn(client, "f", pid, 0, commit=True) == ErrorCode.producer_fenced
        assert produce_txn(client, "f", pid, 0, 1, b"late").error_code == (
            ErrorCode.invalid_producer_epoch
        )
        assert end_txn(client, "f", pid + 1000, 1, commit=True) == (
            ErrorCode.invalid_producer_id_mapping
        )
        assert end_txn(client, "f", pid, 1, commit=True) == ErrorCode.invalid_txn_state  # Empty
        assert [(r.error_code, r.transactional_id) for r in describe(client, "unknown")] == [
            (ErrorCode.transactional_id_not_found, "unknown")
        ]


def _offset_fetch(client: WireClient, *, require_stable: bool) -> Any:
    body = OffsetFetchRequest(
        groups=(
            OffsetFetchRequestGroup(
                group_id="g", topics=(OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)
            ),
        ),
        require_stable=require_stable,
    )
    return client.request(OFFSET_FETCH, 8, body).groups[0].topics[0].partitions[0]


def _txn_offset_commit(
    client: WireClient, pid: int, epoch: int, offset: int, *, metadata: str = "m"
) -> ErrorCode:
    body = TxnOffsetCommitRequest(
        transactional_id="o",
        group_id="g",
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            TxnOffsetCommitRequestTopic(
                name="t",
                partitions=(
                    TxnOffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=metadata,
                    ),
                ),
            ),
        ),
    )
    return client.request(TXN_OFFSET_COMMIT, 3, body).topics[0].partitions[0].error_code  # type: ignore[no-any-return]


def test_transactional_offsets_are_pending_until_the_commit(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "t", partitions=1)
    with WireClient(bootstrap) as client:
        init = init_pid(client, "o")
        pid, epoch = init.producer_id, init.producer_epoch
        # Offsets before the group's partition was added: refused.
        assert _txn_offset_commit(client, pid, epoch, 7) == ErrorCode.invalid_txn_state
        add = AddOffsetsToTxnRequest(
            transactional_id="o", producer_id=pid, producer_epoch=epoch, group_id="g"
        )
        assert client.request(ADD_OFFSETS, 3, add).error_code == ErrorCode.none
        assert _txn_offset_commit(client, pid, epoch, 7, metadata="x" * 4097) == (
            ErrorCode.offset_metadata_too_large  # offset.metadata.max.bytes, as OffsetCommit
        )
        assert _txn_offset_commit(client, pid, epoch, 7) == ErrorCode.none

        pending = _offset_fetch(client, require_stable=True)
        assert (pending.error_code, pending.committed_offset) == (
            ErrorCode.unstable_offset_commit,
            -1,
        )
        assert _offset_fetch(client, require_stable=False).committed_offset == -1
        assert end_txn(client, "o", pid, epoch, commit=True) == ErrorCode.none
        stable = _offset_fetch(client, require_stable=True)
        assert (stable.error_code, stable.committed_offset, stable.metadata) == (
            ErrorCode.none,
            7,
            "m",
        )

        # An aborted transaction's offsets never take effect.
        assert client.request(ADD_OFFSETS, 3, add).error_code == ErrorCode.none
        assert _txn_offset_commit(client, pid, epoch, 9) == ErrorCode.none
        assert end_txn(client, "o", pid, epoch, commit=False) == ErrorCode.none
        assert _offset_fetch(client, require_stable=True).committed_offset == 7


def test_list_transactions_filters(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "t", partitions=1)
    with WireClient(bootstrap) as client:
        a = init_pid(client, "list-a")
        assert add_partitions(client, "list-a", a.producer_id, 0, {"t": [0]}) == {
            ("t", 0): ErrorCode.none
        }
        assert end_txn(client, "list-a", a.producer_id, 0, commit=True) == ErrorCode.none
        b = init_pid(client, "list-b")
        assert add_partitions(client, "list-b", b.producer_id, 0, {"t": [0]}) == {
            ("t", 0): ErrorCode.none
        }

        def listed(**filters: Any) -> tuple[list[tuple[str, int, str]], list[str]]:
            body = ListTransactionsRequest(
                state_filters=filters.get("states", ()),
                producer_id_filters=filters.get("pids", ()),
                duration_filter=filters.get("duration", -1),
            )
            response = client.request(LIST_TXNS, 1, body)
            assert response.error_code == ErrorCode.none
            rows = [
                (s.transactional_id, s.producer_id, s.transaction_state)
                for s in response.transaction_states
            ]
            return sorted(rows), list(response.unknown_state_filters)

        assert listed() == (
            [("list-a", a.producer_id, "CompleteCommit"), ("list-b", b.producer_id, "Ongoing")],
            [],
        )
        assert listed(states=("Ongoing", "Bogus")) == (
            [("list-b", b.producer_id, "Ongoing")],
            ["Bogus"],
        )
        assert listed(states=("Bogus",)) == ([], ["Bogus"])
        assert listed(pids=(a.producer_id,)) == ([("list-a", a.producer_id, "CompleteCommit")], [])
        assert listed(duration=3_600_000) == ([], [])  # nothing has run for an hour
        # Only open transactions have a duration: list-a's finished one does not count.
        assert listed(duration=0) == ([("list-b", b.producer_id, "Ongoing")], [])


@contextlib.contextmanager
def _client_of_new_broker(data_dir: Path) -> Iterator[WireClient]:
    """A client of a broker started in process on ``data_dir``, once topic t exists (one
    partition); the broker stops when the block ends."""
    with Broker(data_dir, listen="127.0.0.1:0") as broker:
        create_topic(broker.bootstrap_servers, "t", partitions=1)
        with WireClient(broker.bootstrap_servers) as client:
            yield client


def test_a_commit_decided_before_a_failure_is_finished_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PrepareCommit is durable, then writing the markers fails (a disk error, or a crash):
    the client is told to retry, and the next start completes the commit."""
    data_dir = tmp_path / "data"
    with _client_of_new_broker(data_dir) as client:
        pid, epoch = open_transaction(client, "p", b"decided")

        def broken(*args: object, **kwargs: object) -> None:
            raise OSError(5, "Input/output error")

        with monkeypatch.context() as patched:
            patched.setattr(Log, "append_marker", broken)
            assert end_txn(client, "p", pid, epoch, commit=True) == (
                ErrorCode.coordinator_not_available
            )
        assert fetch(client, isolation=READ_COMMITTED).last_stable_offset == 0
        (state,) = describe(client, "p")
        assert state.transaction_state == "PrepareCommit"
        # The producer may not change its mind: the outcome is decided.
        assert end_txn(client, "p", pid, epoch, commit=False) == ErrorCode.invalid_txn_state

    with (
        Broker(data_dir, listen="127.0.0.1:0") as broker,
        WireClient(broker.bootstrap_servers) as client,
    ):
        deadline = time.monotonic() + 10
        while True:  # the coordinator loads in the background
            (state,) = describe(client, "p")
            if state.error_code == ErrorCode.none or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert state.transaction_state == "CompleteCommit"
        committed = fetch(client, isolation=READ_COMMITTED)
        assert committed.last_stable_offset == committed.high_watermark == 2
        assert [r.value for r in decode_all(committed.records)] == [b"decided"]
        assert end_txn(client, "p", pid, epoch, commit=True) == ErrorCode.none  # the retry


def _append_offline(data_dir: Path, pid: int, epoch: int, seq: int, value: bytes) -> None:
    """Write transactional data straight into t-0 while no broker runs: what a partition
    holds when the state-log record that added it to a transaction was lost."""
    logs = LogManager.open(data_dir, defaults=TopicConfig(), clock=lambda: 1_767_225_600_000)
    try:
        batch = build_batch(
            [SimpleRecord(value=value, timestamp_ms=1_767_225_600_000)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        logs.log("t", 0).append(batch)
    finally:
        logs.close()


def _loaded(client: WireClient, txn_id: str) -> Any:
    deadline = time.monotonic() + 10
    while True:  # the coordinator loads in the background
        body = ListTransactionsRequest(state_filters=(), producer_id_filters=())
        response = client.request(LIST_TXNS, 1, body)
        if response.error_code == ErrorCode.none or time.monotonic() > deadline:
            return [s for s in response.transaction_states if s.transactional_id == txn_id]
        time.sleep(0.05)


def test_transactional_data_no_transaction_accounts_for_is_aborted_at_start(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    with _client_of_new_broker(data_dir) as client:
        pid, _ = open_transaction(client, "h", b"one")
        assert end_txn(client, "h", pid, 0, commit=True) == ErrorCode.none
    # The next transaction of "h" wrote to t-0, and an unknown producer did too, but the
    # records adding t-0 to their transactions never reached the disk.
    _append_offline(data_dir, pid, 0, 1, b"lost")
    _append_offline(data_dir, 987_654, 0, 0, b"stranger")

    with (
        Broker(data_dir, listen="127.0.0.1:0") as broker,
        WireClient(broker.bootstrap_servers) as client,
    ):
        (state,) = _loaded(client, "h")
        assert state.transaction_state == "Empty"
        committed = fetch(client, isolation=READ_COMMITTED)
        # Recovery did not mistake "lost" for the committed transaction's data (it lies
        # above that commit's bound): both strays are aborted, nothing stays open.
        assert committed.last_stable_offset == committed.high_watermark == 6
        assert sorted((a.producer_id, a.first_offset) for a in committed.aborted_transactions) == [
            (pid, 2),
            (987_654, 3),
        ]
        # "h" was fenced: a live producer that thought "lost" was in its transaction
        # cannot commit it.
        assert end_txn(client, "h", pid, 0, commit=True) == ErrorCode.producer_fenced
        assert init_pid(client, "h").producer_epoch == 2
