"""Broker configuration, by Kafka's broker setting names.

A configuration comes from three places, later ones winning: the defaults below (Kafka's
own defaults unless noted), a Java-properties file (``--config FILE``, the format of Kafka's
``server.properties``) and ``key=value`` overrides (``--set``). Unknown names are reported
back to the caller (Kafka logs "supplied but isn't a known config" and carries on; so do we,
so an existing ``server.properties`` can be reused), bad values raise :class:`ConfigError`.

Log-level settings (``log.segment.bytes``, ``log.retention.ms``, ...) are the broker-wide
defaults of the topic-level settings in :data:`riverbed.log.config.TOPIC_CONFIGS`; the
mapping between the two names lives there, so this module only adds the broker's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from riverbed.log.config import TOPIC_CONFIGS, LogConfig
from riverbed.log.errors import InvalidConfigError

__all__ = ["BROKER_SETTINGS", "BrokerConfig", "ConfigError", "Listener", "parse_properties"]

# Kafka's default port; DESIGN.md makes 127.0.0.1:9092 the default listen address.
DEFAULT_LISTEN = "127.0.0.1:9092"


class ConfigError(ValueError):
    """A configuration value or file the user gave is wrong; the message says which."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Listener:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        """``HOST:PORT`` or Kafka's ``PLAINTEXT://HOST:PORT`` (the first of a list)."""
        spec = text.split(",")[0].strip()
        if "://" in spec:
            scheme, _, spec = spec.partition("://")
            if scheme.upper() != "PLAINTEXT":
                raise ConfigError(f"listener {text!r}: only PLAINTEXT is supported")
        host, sep, port_text = spec.rpartition(":")
        if not sep or not port_text.isdigit() or int(port_text) > 65535:
            raise ConfigError(f"listener {text!r} is not HOST:PORT")
        host = host.strip("[]") or "0.0.0.0"
        return cls(host=host, port=int(port_text))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if not low <= value <= high:
            raise ValueError(f"expected a whole number in [{low}, {high}], got {value}")
        return value

    return parse


_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One broker-level setting: its Kafka name, the field it fills, its parser and doc."""

    name: str
    attribute: str
    parse: Callable[[str], object]
    doc: str


# The broker's own settings. Defaults are on BrokerConfig's fields, with their source.
BROKER_SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="node.id", attribute="node_id", parse=_int_in(0, _INT32_MAX), doc="This broker's id."
    ),
    Setting(
        name="broker.id",
        attribute="node_id",
        parse=_int_in(0, _INT32_MAX),
        doc="Older name of node.id.",
    ),
    Setting(
        name="listeners",
        attribute="listen",
        parse=Listener.parse,
        doc="Address to listen on (HOST:PORT or PLAINTEXT://HOST:PORT).",
    ),
    Setting(
        name="advertised.listeners",
        attribute="advertised",
        parse=Listener.parse,
        doc="Address given to clients in metadata (default: the listen address).",
    ),
    Setting(
        name="num.partitions",
        attribute="num_partitions",
        parse=_int_in(1, 1_000_000),
        doc="Partitions of an auto-created topic, or of a created topic that names none.",
    ),
    Setting(
        name="auto.create.topics.enable",
        attribute="auto_create_topics_enable",
        parse=_bool,
        doc="Create a topic when a client asks for metadata of a missing one.",
    ),
    Setting(
        name="socket.request.max.bytes",
        attribute="socket_request_max_bytes",
        parse=_int_in(1, _INT32_MAX),
        doc="Largest request frame accepted; a larger one closes the connection.",
    ),
    Setting(
        name="connections.max.idle.ms",
        attribute="connections_max_idle_ms",
        parse=_int_in(1, 2**63 - 1),
        doc="Idle connections are closed after this many milliseconds.",
    ),
    Setting(
        name="log.flush.offset.checkpoint.interval.ms",
        attribute="log_flush_offset_checkpoint_interval_ms",
        parse=_int_in(1, _INT32_MAX),
        doc="How often every log is fsynced and its recovery point saved.",
    ),
    Setting(
        name="queued.max.requests.per.connection",
        attribute="max_in_flight_per_connection",
        parse=_int_in(1, 10_000),
        doc="Requests of one connection handled at once before reading is paused "
        "(riverbed's; Kafka handles one at a time per connection).",
    ),
    Setting(
        name="group.initial.rebalance.delay.ms",
        attribute="group_initial_rebalance_delay_ms",
        parse=_int_in(0, _INT32_MAX),
        doc="How long the first rebalance of an empty group waits for more members to join.",
    ),
    Setting(
        name="group.min.session.timeout.ms",
        attribute="group_min_session_timeout_ms",
        parse=_int_in(0, _INT32_MAX),
        doc="Smallest session timeout a group member may ask for.",
    ),
    Setting(
        name="group.max.session.timeout.ms",
        attribute="group_max_session_timeout_ms",
        parse=_int_in(0, _INT32_MAX),
        doc="Largest session timeout a group member may ask for.",
    ),
    Setting(
        name="group.max.size",
        attribute="group_max_size",
        parse=_int_in(1, _INT32_MAX),
        doc="Most members a classic group may have.",
    ),
    Setting(
        name="offsets.retention.minutes",
        attribute="offsets_retention_minutes",
        parse=_int_in(1, _INT32_MAX),
        doc="Committed offsets of a group that has been empty this long are deleted.",
    ),
    Setting(
        name="offsets.retention.check.interval.ms",
        attribute="offsets_retention_check_interval_ms",
        parse=_int_in(1, 2**63 - 1),
        doc="How often offsets are checked for expiry.",
    ),
    Setting(
        name="offsets.topic.num.partitions",
        attribute="offsets_topic_num_partitions",
        parse=_int_in(1, 10_000),
        doc="Partitions of __consumer_offsets (only when it is created).",
    ),
    Setting(
        name="offsets.topic.segment.bytes",
        attribute="offsets_topic_segment_bytes",
        parse=_int_in(1024, _INT32_MAX),
        doc="Segment size of __consumer_offsets (only when it is created).",
    ),
    Setting(
        name="group.consumer.session.timeout.ms",
        attribute="group_consumer_session_timeout_ms",
        parse=_int_in(1, _INT32_MAX),
        doc="A group.protocol=consumer member not heard from for this long is removed.",
    ),
    Setting(
        name="group.consumer.heartbeat.interval.ms",
        attribute="group_consumer_heartbeat_interval_ms",
        parse=_int_in(1, _INT32_MAX),
        doc="How often group.protocol=consumer members are told to heartbeat.",
    ),
    Setting(
        name="group.consumer.max.size",
        attribute="group_consumer_max_size",
        parse=_int_in(1, _INT32_MAX),
        doc="Most members of one group.protocol=consumer group.",
    ),
    Setting(
        name="transaction.max.timeout.ms",
        attribute="transaction_max_timeout_ms",
        parse=_int_in(1, _INT32_MAX),
        doc="Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT).",
    ),
    Setting(
        name="transaction.state.log.num.partitions",
        attribute="transaction_state_log_num_partitions",
        parse=_int_in(1, 100_000),
        doc="Partitions of __transaction_state (only when it is created).",
    ),
    Setting(
        name="transaction.state.log.segment.bytes",
        attribute="transaction_state_log_segment_bytes",
        parse=_int_in(1024, _INT32_MAX),
        doc="Segment size of __transaction_state (only when it is created).",
    ),
    Setting(
        name="transactional.id.expiration.ms",
        attribute="transactional_id_expiration_ms",
        parse=_int_in(1, _INT32_MAX),
        doc="A transactional id without a transaction for this long is forgotten.",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """The effective configuration of one broker."""

    data_dir: Path
    node_id: int = 0  # Kafka: no default in KRaft mode; 0 for a single broker.
    listen: Listener = field(default_factory=lambda: Listener.parse(DEFAULT_LISTEN))
    advertised: Listener | None = None
    num_partitions: int = 1  # Kafka default.
    auto_create_topics_enable: bool = True  # Kafka default.
    socket_request_max_bytes: int = 104_857_600  # Kafka default: 100 MiB.
    connections_max_idle_ms: int = 600_000  # Kafka default: 10 minutes.
    log_flush_offset_checkpoint_interval_ms: int = 60_000  # Kafka default: 1 minute.
    # Kafka's queued.max.requests is 500 for the whole broker; per connection, librdkafka and
    # the Java client keep at most 5 requests in flight, so 16 never throttles a real client.
    max_in_flight_per_connection: int = 16
    group_initial_rebalance_delay_ms: int = 3000  # Kafka default: 3 seconds.
    group_min_session_timeout_ms: int = 6000  # Kafka default: 6 seconds.
    group_max_session_timeout_ms: int = 1_800_000  # Kafka default: 30 minutes.
    group_max_size: int = _INT32_MAX  # Kafka default: Integer.MAX_VALUE (no limit).
    offsets_retention_minutes: int = 10080  # Kafka default: 7 days.
    offsets_retention_check_interval_ms: int = 600_000  # Kafka default: 10 minutes.
    offsets_topic_num_partitions: int = 50  # Kafka default.
    offsets_topic_segment_bytes: int = 104_857_600  # Kafka default: 100 MiB.
    group_consumer_session_timeout_ms: int = 45_000  # Kafka default (KIP-848).
    group_consumer_heartbeat_interval_ms: int = 5_000  # Kafka default (KIP-848).
    group_consumer_max_size: int = _INT32_MAX  # Kafka default: unlimited.
    transaction_max_timeout_ms: int = 900_000  # Kafka default: 15 minutes.
    transaction_state_log_num_partitions: int = 50  # Kafka default.
    transaction_state_log_segment_bytes: int = 104_857_600  # Kafka default: 100 MiB.
    transactional_id_expiration_ms: int = 604_800_000  # Kafka default: 7 days.
    log_defaults: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def build(
        cls,
        *,
        data_dir: Path,
        properties: Mapping[str, str] = {},
        listen: str | None = None,
    ) -> tuple[BrokerConfig, list[str]]:
        """The configuration for these properties, and the names that were not recognised.

        ``listen`` (the ``--listen`` flag) wins over ``listeners`` in the properties.
        """
        values: dict[str, object] = {}
        log_overrides: dict[str, str] = {}
        unknown: list[str] = []
        by_name = {setting.name: setting for setting in BROKER_SETTINGS}
        topic_by_broker_name = {spec.broker_name: name for name, spec in TOPIC_CONFIGS.items()}
        for name, text in properties.items():
            if name in by_name:
                setting = by_name[name]
                try:
                    values[setting.attribute] = setting.parse(text)
                except (ValueError, ConfigError) as e:
                    raise ConfigError(f"{name}={text!r}: {e}") from None
            elif name in topic_by_broker_name:
                log_overrides[topic_by_broker_name[name]] = text
            elif name in ("log.dirs", "log.dir", "process.roles"):
                continue  # the data directory comes from --data-dir; one process, one role
            else:
                unknown.append(name)
        if listen is not None:
            values["listen"] = Listener.parse(listen)
        for topic_name, text in log_overrides.items():  # each error under the name given
            definition = TOPIC_CONFIGS[topic_name]
            try:
                definition.parse(text)
            except InvalidConfigError as e:
                raise ConfigError(f"{definition.broker_name}={text!r}: {e}") from None
        log_defaults = LogConfig.from_properties(log_overrides, base=LogConfig())
        config = cls(data_dir=data_dir, log_defaults=log_defaults)
        return dataclasses.replace(config, **values), unknown  # type: ignore[arg-type]

    def advertised_listener(self, *, bound_port: int) -> Listener:
        """What clients are told to connect to: the advertised address, else the bound one."""
        if self.advertised is not None:
            return self.advertised
        host = self.listen.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"  # a wildcard is no address to connect to
        return Listener(host=host, port=bound_port)


def parse_properties(lines: Iterable[str], *, source: str) -> dict[str, str]:
    """Parse Java-properties text (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
    result: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separators = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not separators:
            raise ConfigError(f"{source}:{number}: expected key=value, got {raw.rstrip()!r}")
        cut = min(separators)
        result[line[:cut].strip()] = line[cut + 1 :].strip()
    return result


def parse_assignments(assignments: Iterable[str]) -> dict[str, str]:
    """``--set key=value`` arguments as a mapping."""
    result: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key=value")
        result[key.strip()] = value.strip()
    return result
