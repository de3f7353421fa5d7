"""What the ``riverbed`` sink writes and with which client settings, checked on the driver.

The input columns and options are those of Spark's Kafka sink (``KafkaWriter``):

======================  ============================================  =======================
column                  type                                          when absent
======================  ============================================  =======================
``value``               string or binary                              an error
``key``                 string or binary                              no key (null)
``topic``               string                                        the ``topic`` option
``partition``           int                                           the producer's
                                                                      partitioner
``headers``             array<struct<key: string, value: binary>>     no headers
``timestamp``           timestamp or double (seconds)                 the producer's clock
======================  ============================================  =======================

The ``topic`` option, when set, wins over the ``topic`` column (as in Spark). Other columns
are ignored. Options ``kafka.*`` go to the confluent-kafka (librdkafka) producer without the
prefix; ``kafka.bootstrap.servers`` is required. The messages of
:class:`~riverbed.spark.errors.SinkOptionError` are Spark's, so a job that moves between
``format("kafka")`` and ``format("riverbed")`` fails the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from riverbed.spark.errors import SinkOptionError

__all__ = [
    "BOOTSTRAP_SERVERS_OPTION",
    "TOPIC_OPTION",
    "SinkPlan",
]

TOPIC_OPTION = "topic"
KAFKA_PREFIX = "kafka."
BOOTSTRAP_SERVERS_OPTION = "kafka.bootstrap.servers"

TRANSACTION_TIMEOUT_MS = "900000"
"""The producer's ``transaction.timeout.ms`` unless ``kafka.transaction.timeout.ms`` is given:
Kafka's ``transaction.max.timeout.ms`` default (15 minutes), the most a default broker allows.
A task's whole partition is one transaction, and librdkafka's own default (60 s) would make a
task that needs longer fail on every retry. The cost: a transaction left open by a crashed
task that is never retried holds back read_committed readers until the broker aborts it."""

RECONNECT_BACKOFF_MS = "10"
"""The clients' ``reconnect.backoff.ms`` unless ``kafka.reconnect.backoff.ms`` is given.
Every write task starts new clients, and librdkafka connects to the first broker it learns
from the bootstrap servers only ``reconnect.backoff.ms / 2`` after its first connection (at
least 11 ms): with librdkafka's default (100 ms), the task's ``init_transactions`` and its
progress read each waited about 50 ms for that, on a broker answering in 1 ms."""

REFUSED_KAFKA_OPTIONS = {
    "transactional.id": "the sink gives every write task its own transactional id",
    "key.serializer": "keys are serialized with ByteArraySerializer.",
    "value.serializer": (
        "values are serialized with ByteArraySerializer. Use functions to explicitly "
        "serialize values."
    ),
}
"""``kafka.*`` options the sink refuses, and why (the serializers' reasons are Spark's)."""

CLIENT_OPTION_PREFIXES = (
    "bootstrap.servers",
    "client.",
    "security.",
    "sasl.",
    "ssl.",
    "socket.",
    "broker.address.",
    "connections.",
    "reconnect.",
    "api.version.",
    "metadata.",
    "debug",
)
"""The librdkafka settings that also apply to the sink's consumer and admin clients (how to
reach and authenticate to the brokers); producer settings would only draw warnings there."""


HEADER_TYPE = "array<struct<key:string,value:binary>>"


def _is_headers_type(data_type: DataType) -> bool:
    """Spark's ``KafkaRecordToRowConverter.headersType``, nullability aside (``sameType``)."""
    if not isinstance(data_type, ArrayType):
        return False
    element = data_type.elementType
    if not isinstance(element, StructType) or len(element.fields) != 2:
        return False
    key, value = element.fields
    return (
        key.name == "key"
        and isinstance(key.dataType, StringType)
        and value.name == "value"
        and isinstance(value.dataType, BinaryType)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkColumns:
    """Which optional columns the input has, and whether key and value are strings."""

    key: bool
    key_is_string: bool
    value_is_string: bool
    topic: bool
    partition: bool
    headers: bool
    timestamp: bool
    timestamp_is_seconds: bool
    """A ``double`` timestamp column holds seconds since the epoch (Spark casts it)."""


def _column_type(schema: StructType, name: str) -> DataType | None:
    for column in schema.fields:
        if column.name == name:
            return column.dataType
    return None


def _type_error(name: str, data_type: DataType, allowed: str) -> SinkOptionError:
    return SinkOptionError(
        f"{name} attribute unsupported type {data_type.simpleString()}. "
        f"{name} must be a(n) {allowed}"
    )


def check_columns(schema: StructType, *, topic_option: str | None) -> SinkColumns:
    """The input columns the sink uses, or :class:`SinkOptionError` in Spark's words."""
    value = _column_type(schema, "value")
    if value is None:
        raise SinkOptionError("Required attribute 'value' not found")
    if not isinstance(value, StringType | BinaryType):
        raise _type_error("value", value, "string or binary")
    key = _column_type(schema, "key")
    if key is not None and not isinstance(key, StringType | BinaryType):
        raise _type_error("key", key, "string or binary")
    topic = _column_type(schema, "topic")
    if topic_option is None:
        if topic is None:
            raise SinkOptionError(
                "topic option required when no 'topic' attribute is present. "
                "Use the topic option for setting a topic."
            )
        if not isinstance(topic, StringType):
            raise _type_error("topic", topic, "string")
    partition = _column_type(schema, "partition")
    if partition is not None and not isinstance(partition, IntegerType):
        raise _type_error("partition", partition, "int")
    headers = _column_type(schema, "headers")
    if headers is not None and not _is_headers_type(headers):
        raise _type_error("headers", headers, HEADER_TYPE)
    timestamp = _column_type(schema, "timestamp")
    if timestamp is not None and not isinstance(timestamp, TimestampType | DoubleType):
        raise _type_error("timestamp", timestamp, "double or timestamp")
    return SinkColumns(
        key=key is not None,
        key_is_string=isinstance(key, StringType),
        value_is_string=isinstance(value, StringType),
        topic=topic_option is None,
        partition=partition is not None,
        headers=headers is not None,
        timestamp=timestamp is not None,
        timestamp_is_seconds=isinstance(timestamp, DoubleType),
    )


def producer_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without the prefix, plus the sink's defaults."""
    settings = {
        name[len(KAFKA_PREFIX) :]: str(value)
        for name, value in options.items()
        if name.lower().startswith(KAFKA_PREFIX)
    }
    if not settings.get("bootstrap.servers"):
        raise SinkOptionError(
            f"Option '{BOOTSTRAP_SERVERS_OPTION}' must be specified for configuring Kafka producer"
        )
    for name, reason in REFUSED_KAFKA_OPTIONS.items():
        if name in settings:
            raise SinkOptionError(f"Kafka option '{name}' is not supported as {reason}")
    settings.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
    settings.setdefault("reconnect.backoff.ms", RECONNECT_BACKOFF_MS)
    return settings


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkPlan:
    """Everything a write task needs, built once on the driver and pickled to executors."""

    topic: str | None
    """The ``topic`` option; it wins over the ``topic`` column."""
    columns: SinkColumns
    producer: dict[str, str] = field(repr=False)
    """librdkafka settings of the task's transactional producer (its id is added per task)."""

    @classmethod
    def build(cls, options: Mapping[str, str], schema: StructType) -> SinkPlan:
        """Check the options and input columns (raises :class:`SinkOptionError`)."""
        lowered = {name.lower(): value for name, value in options.items()}
        topic = lowered.get(TOPIC_OPTION)
        return cls(
            topic=topic,
            columns=check_columns(schema, topic_option=topic),
            producer=producer_settings(lowered),
        )

    def client_settings(self) -> dict[str, str | int | float | bool]:
        """Settings for the sink's consumer and admin clients: reaching the brokers only."""
        return {
            name: value
            for name, value in self.producer.items()
            if name.startswith(CLIENT_OPTION_PREFIXES)
        }
