"""Which Kafka APIs and versions riverbed implements, and which it advertises.

ApiVersions advertises ``[advertised_min, max]`` per API; ``decode_request`` accepts only
``[min_implemented, max]`` and raises ``UnsupportedVersionError`` below that. Clients always
pick the highest version both sides support, so a low advertised minimum costs nothing unless a
client really sends it. Apache Kafka 4.0 does exactly this for Produce 0-2 (KAFKA-18659).

Why each range (sources in brackets):

- Advertised minimums. librdkafka enables a feature only if the broker's range *overlaps* a
  fixed range [confluentinc/librdkafka src/rdkafka_feature.c]: consumer groups need
  FindCoordinator, JoinGroup, SyncGroup, Heartbeat and LeaveGroup to include v0, OffsetCommit
  to overlap 1-2 and OffsetFetch 1; the idempotent producer needs InitProducerId 0; message
  format v2 needs Produce 3 and Fetch 4; zstd needs Produce 7 and Fetch 10; timestamp lookups
  need ListOffsets 1. Older librdkafka turns gzip/snappy/lz4 off unless Produce 0 is advertised
  (librdkafka#4956), hence Produce advertises 0 but implements 3+ (kio has no Produce 0-2 and
  message formats v0/v1 are not stored).
- Implemented minimums. aiokafka 0.14 sends the highest version it knows inside our range
  (``aiokafka/protocol/api.py`` ``prepare``), and it knows only low maxima: Metadata 5,
  ListOffsets 5, Fetch 11, Produce 8, FindCoordinator 1, JoinGroup 5, SyncGroup 3, Heartbeat 1,
  LeaveGroup 1, OffsetCommit 3, OffsetFetch 3, InitProducerId 0, the transaction APIs 0,
  CreateTopics 3, DeleteTopics 3, DescribeConfigs 2, CreatePartitions 1. Every implemented
  range covers those, and goes down to kio 0.6.5's lowest schema where that is cheap.
  Java 4.x clients need the KIP-896 baseline (Produce 3, Fetch 4, ListOffsets 1,
  OffsetCommit 2, OffsetFetch 1), which these ranges satisfy.
- Maximums. The Java client 3.4.1 (pinned by Spark 3.5) tops out at Produce 9, Fetch 13,
  ListOffsets 7, Metadata 12, OffsetCommit 8, OffsetFetch 8, FindCoordinator 4, InitProducerId
  4, the transaction APIs 3. We cap Fetch at 12 because v13+ addresses topics by topic ID only,
  and Metadata at 12 (v13 only adds a top-level error code; Redpanda notes Java trouble at v9+
  with bad topic IDs, so the broker must fill ``topic_id`` consistently). Produce goes to 11:
  v10/v11 only add KIP-951 tagged leader hints to the response, which may stay empty; v12 is
  KIP-890 transactions v2. ApiVersions goes to 4 (v4 only lifts a feature-range restriction we
  do not use), saving newer clients a retry.
- The consumer group protocol of KIP-848 (``group.protocol=consumer``). librdkafka 2.16 sends
  ConsumerGroupHeartbeat v1 only (``rd_kafka_ConsumerGroupHeartbeatRequest`` asks for 1-1:
  the client makes its own member id and may send a regex; without v1 the consumer fails with
  ``UNSUPPORTED_FEATURE``). It needs no finalized ``group.version`` feature in ApiVersions, and
  commits with OffsetCommit up to v9 (member epoch as generation) [src/rdkafka_request.c].
  v0 differs only in that the coordinator makes the member id and there is no regex, so 0-1
  are both served. ConsumerGroupDescribe 0-1 (v1 adds ``member_type``) is what admin clients
  use for such groups (Kafka 4.0: 0-1).
- Transactions. librdkafka 2.16 sends FindCoordinator v2 (key type 1), InitProducerId v4,
  AddPartitionsToTxn v0, AddOffsetsToTxn/TxnOffsetCommit within 0-3 and EndTxn v1.
  AddPartitionsToTxn v4+ is broker-to-broker (KIP-890 verification), and EndTxn v5 and
  TxnOffsetCommit v4+ are transactions v2 (KIP-890 part 2, with Produce v12), so all stop
  at 3, as for the Java 3.x client. DescribeTransactions 0 and ListTransactions 0-2 (v1
  duration filter, v2 id pattern) are the admin APIs of ``kafka-transactions.sh``.
- kafka-python 3.0.12 guesses the broker version from probes
  (``kafka/protocol/broker_version_data.py``): Produce 11 makes it infer 3.8, so it uses record
  batch v2 and current request versions without ``api_version=``. Its newer probes need
  ListOffsets 10 (4.0), Produce 13 (4.1), ListOffsets 11 (4.2) or DescribeLogDirs 5 (4.3).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = (
    "SUPPORTED_APIS",
    "AdvertisedApi",
    "ApiKey",
    "VersionRange",
    "advertised_apis",
)


class ApiKey(enum.IntEnum):
    """Kafka API keys riverbed knows (kafka.apache.org/protocol#protocol_api_keys)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionRange:
    """Advertised ``[advertised_min, max]``; decoded ``[min_implemented, max]``."""

    advertised_min: int
    min_implemented: int
    max: int

    def implements(self, version: int) -> bool:
        return self.min_implemented <= version <= self.max


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvertisedApi:
    """One entry of an ApiVersions response."""

    api_key: ApiKey
    min_version: int
    max_version: int


def _r(advertised_min: int, min_implemented: int, max_version: int) -> VersionRange:
    return VersionRange(
        advertised_min=advertised_min, min_implemented=min_implemented, max=max_version
    )


# Reasons per row: see the module docstring. Every version listed here has a kio 0.6.5 schema.
SUPPORTED_APIS: Mapping[ApiKey, VersionRange] = MappingProxyType(
    {
        ApiKey.PRODUCE: _r(0, 3, 11),
        ApiKey.FETCH: _r(4, 4, 12),
        ApiKey.LIST_OFFSETS: _r(1, 1, 7),
        ApiKey.METADATA: _r(0, 0, 12),
        ApiKey.OFFSET_COMMIT: _r(2, 2, 8),
        ApiKey.OFFSET_FETCH: _r(1, 1, 8),
        ApiKey.FIND_COORDINATOR: _r(0, 0, 4),
        ApiKey.JOIN_GROUP: _r(0, 0, 9),
        ApiKey.HEARTBEAT: _r(0, 0, 4),
        ApiKey.LEAVE_GROUP: _r(0, 0, 5),
        ApiKey.SYNC_GROUP: _r(0, 0, 5),
        ApiKey.DESCRIBE_GROUPS: _r(0, 0, 6),
        ApiKey.LIST_GROUPS: _r(0, 0, 5),
        ApiKey.API_VERSIONS: _r(0, 0, 4),
        ApiKey.CREATE_TOPICS: _r(2, 2, 7),
        ApiKey.DELETE_TOPICS: _r(1, 1, 6),
        ApiKey.DELETE_RECORDS: _r(0, 0, 2),
        ApiKey.INIT_PRODUCER_ID: _r(0, 0, 4),
        ApiKey.ADD_PARTITIONS_TO_TXN: _r(0, 0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: _r(0, 0, 3),
        ApiKey.END_TXN: _r(0, 0, 3),
        ApiKey.TXN_OFFSET_COMMIT: _r(0, 0, 3),
        ApiKey.DESCRIBE_CONFIGS: _r(1, 1, 4),
        ApiKey.ALTER_CONFIGS: _r(0, 0, 2),
        ApiKey.CREATE_PARTITIONS: _r(0, 0, 3),
        ApiKey.DELETE_GROUPS: _r(0, 0, 2),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: _r(0, 0, 1),
        ApiKey.OFFSET_DELETE: _r(0, 0, 0),
        ApiKey.DESCRIBE_CLUSTER: _r(0, 0, 1),
        ApiKey.DESCRIBE_TRANSACTIONS: _r(0, 0, 0),
        ApiKey.LIST_TRANSACTIONS: _r(0, 0, 2),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: _r(0, 0, 1),
        ApiKey.CONSUMER_GROUP_DESCRIBE: _r(0, 0, 1),
    }
)


def advertised_apis(served: Collection[ApiKey]) -> tuple[AdvertisedApi, ...]:
    """What ApiVersions advertises when the broker has handlers for ``served``, by api key.

    ApiVersions itself is always included: a client cannot even ask without it.
    """
    keys = set(served) | {ApiKey.API_VERSIONS}
    return tuple(
        AdvertisedApi(api_key=key, min_version=r.advertised_min, max_version=r.max)
        for key, r in sorted(SUPPORTED_APIS.items())
        if key in keys
    )
