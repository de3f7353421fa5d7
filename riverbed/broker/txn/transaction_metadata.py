"""A transactional id's state, and how it is stored in ``__transaction_state``.

States and transitions are Kafka's (``TransactionState``)::

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn(commit)--> PrepareCommit --markers-->
    CompleteCommit; the same through PrepareAbort/CompleteAbort for an abort, a timeout or
    a fence; a Complete* or Empty id goes Ongoing again with its next transaction.

Records, one per change (the last one per key wins; compaction keeps it)::

    key   {"v":0,"type":"txn","id":TRANSACTIONAL_ID}
    value {"producer_id":P,"producer_epoch":E,"last_producer_epoch":E0,"timeout_ms":T,
           "state":"Ongoing","partitions":[[TOPIC,P],...],"start_ms":MS,"update_ms":MS,
           "bounds":[[TOPIC,P,OFFSET],...]}

A null value (tombstone) forgets an expired id. Prepare* (and Complete*) records keep the
partitions so that recovery can check every marker was written; their ``bounds`` holds each
partition's log end offset when the outcome was decided: the transaction's data is below
it, so recovery never mistakes a later transaction's data for this one's (see the
coordinator). UTF-8 JSON with a fixed key order, as the records of ``__consumer_offsets``
(:func:`riverbed.broker.internal_topics.encode_json`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from riverbed.broker.internal_topics import decode_json_object, encode_json

__all__ = ["TxnMetadata", "TxnState", "decode_key", "decode_value", "encode_key", "encode_value"]

KEY_VERSION = 0
NO_PRODUCER_EPOCH = -1

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Kafka's transaction states (the names are what DescribeTransactions reports)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def commits(self) -> bool:
        """For a Prepare* or Complete* state: whether it is a commit."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


@dataclass(slots=True, kw_only=True)
class TxnMetadata:
    """One transactional id (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    """The epoch before the last bump, so a retried request of it is recognised."""
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    """When the current transaction began (first partition added); -1 when none is open."""
    update_ms: int = -1
    bounds: dict[TopicPartition, int] = field(default_factory=dict)
    """Per partition, its log end offset when the outcome was decided (Prepare*, Complete*)."""

    def copy(self) -> TxnMetadata:
        """An independent copy (its sets and maps are copied too)."""
        return replace(self, partitions=set(self.partitions), bounds=dict(self.bounds))


def encode_key(transactional_id: str) -> bytes:
    return encode_json({"v": KEY_VERSION, "type": "txn", "id": transactional_id})


def decode_key(data: bytes) -> str:
    """The transactional id of a key; ValueError if it is not one."""
    document = decode_json_object(data, what="key")
    if document.get("type") != "txn":
        raise ValueError(f"not a transaction key: {data[:80]!r}")
    transactional_id = document["id"]
    if not isinstance(transactional_id, str):
        raise ValueError(f"bad transactional id in {data[:80]!r}")
    return transactional_id


def encode_value(meta: TxnMetadata) -> bytes:
    return encode_json(
        {
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "last_producer_epoch": meta.last_producer_epoch,
            "timeout_ms": meta.timeout_ms,
            "state": meta.state.value,
            "partitions": sorted([topic, partition] for topic, partition in meta.partitions),
            "start_ms": meta.start_ms,
            "update_ms": meta.update_ms,
            "bounds": sorted([t, p, offset] for (t, p), offset in meta.bounds.items()),
        }
    )


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    """ValueError/KeyError/TypeError if ``data`` is not a value this module wrote."""
    document = decode_json_object(data, what="value")
    return TxnMetadata(
        transactional_id=transactional_id,
        producer_id=int(document["producer_id"]),
        producer_epoch=int(document["producer_epoch"]),
        last_producer_epoch=int(document.get("last_producer_epoch", NO_PRODUCER_EPOCH)),
        timeout_ms=int(document["timeout_ms"]),
        state=TxnState(document["state"]),
        partitions={(str(t), int(p)) for t, p in document.get("partitions", [])},
        start_ms=int(document.get("start_ms", -1)),
        update_ms=int(document.get("update_ms", -1)),
        bounds={(str(t), int(p)): int(o) for t, p, o in document.get("bounds", [])},
    )
