"""Broker configuration, by Kafka's broker setting names.

A configuration comes from three places, later ones winning: the defaults below (Kafka's
own defaults unless noted), a Java-properties file (``--config FILE``, the format of Kafka's
``server.properties``) and ``key=value`` overrides (``--set``). Unknown names are reported
back to the caller (Kafka logs "supplied but isn't a known config" and carries on; so do we,
so an existing ``server.properties`` can be reused), bad values raise :class:`ConfigError`.

Log-level settings (``log.segment.bytes``, ``log.retention.ms``, ...) are the broker-wide
defaults of the topic-level settings in :data:`riverbed.log.topic_config.TOPIC_CONFIGS`; the
mapping between the two names lives there, so this module only adds the broker's own and
Kafka's coarser aliases of two of them (:data:`LOG_TIME_ALIASES`): ``log.retention.minutes``
and ``log.retention.hours`` for ``log.retention.ms``, ``log.roll.hours`` for ``log.roll.ms``.
As in Kafka, the finest unit given wins (ms over minutes over hours).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from riverbed.log import TOPIC_CONFIGS, InvalidConfigError, TopicConfig

__all__ = [
    "BROKER_SETTINGS",
    "DEFAULT_METRICS_LISTEN",
    "LOG_TIME_ALIASES",
    "BrokerConfig",
    "ConfigError",
    "Listener",
    "log_setting_names",
    "parse_properties",
]

# Kafka's default port; DESIGN.md makes 127.0.0.1:9092 the default listen address.
DEFAULT_LISTEN = "127.0.0.1:9092"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9644"
"""Where ``GET /metrics`` is served unless ``metrics.listen`` says otherwise (Redpanda's port
for the same)."""


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


def _optional_listener(text: str) -> Listener | None:
    """``HOST:PORT``, or nothing (an empty value) for a listener that is turned off."""
    return Listener.parse(text) if text.strip() else None


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return lowered == "true"


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise ValueError(f"expected a whole number in [{low}, {high}], got {value}")
        return value

    return parse


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308
"""Java's Double.MAX_VALUE, Kafka's "no limit" for byte rates."""


def _positive_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not value > 0:  # also refuses NaN
        raise ValueError(f"expected a number above 0, got {text.strip()}")
    return value


def _one_cleaner_thread(text: str) -> int:
    value = _int_in(1, _INT32_MAX)(text)
    if value != 1:
        raise ValueError(
            f"riverbed compacts with one cleaner thread; only 1 is accepted, not {value}"
        )
    return value


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
        name="metrics.listen",
        attribute="metrics_listen",
        parse=_optional_listener,
        doc=f"Address of the Prometheus endpoint GET /metrics (default {DEFAULT_METRICS_LISTEN};"
        " port 0 picks a free port; empty: no endpoint).",
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
        name="log.retention.check.interval.ms",
        attribute="log_retention_check_interval_ms",
        parse=_int_in(1, _INT64_MAX),
        doc="How often logs are checked for segments to delete by retention.ms/retention.bytes.",
    ),
    Setting(
        name="log.cleaner.enable",
        attribute="log_cleaner_enable",
        parse=_bool,
        doc="Run the log cleaner, which compacts topics with cleanup.policy=compact.",
    ),
    Setting(
        name="log.cleaner.backoff.ms",
        attribute="log_cleaner_backoff_ms",
        parse=_int_in(0, _INT64_MAX),
        doc="How long the cleaner sleeps when no log needs cleaning.",
    ),
    Setting(
        name="log.cleaner.threads",
        attribute="log_cleaner_threads",
        parse=_one_cleaner_thread,
        doc="Cleaner threads: riverbed has one, so only 1 is accepted.",
    ),
    Setting(
        name="log.cleaner.dedupe.buffer.size",
        attribute="log_cleaner_dedupe_buffer_size",
        parse=_int_in(1, _INT64_MAX),
        doc="Memory for the cleaner's key-to-offset map (bytes): how many keys one pass dedupes.",
    ),
    Setting(
        name="log.cleaner.io.max.bytes.per.second",
        attribute="log_cleaner_io_max_bytes_per_second",
        parse=_positive_float,
        doc="Throttle on the cleaner's reads and writes together (bytes per second).",
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
class TimeAlias:
    """A coarser broker-level name for a topic config in milliseconds (Kafka's synonyms)."""

    name: str
    topic_config: str
    unit_ms: int
    parse: Callable[[str], int]

    def to_ms(self, value: int) -> int:
        """Milliseconds for ``value`` units; -1 (no limit) stays -1, as Kafka reads it."""
        return -1 if value < 0 else value * self.unit_ms


# Kafka's DynamicBrokerConfig.brokerConfigSynonyms, finest first: the ms name (the broker name
# in TOPIC_CONFIGS) wins over these, and minutes over hours. They are ints in Kafka.
LOG_TIME_ALIASES: tuple[TimeAlias, ...] = (
    TimeAlias(
        name="log.retention.minutes",
        topic_config="retention.ms",
        unit_ms=60_000,
        parse=_int_in(-1, _INT32_MAX),
    ),
    TimeAlias(
        name="log.retention.hours",
        topic_config="retention.ms",
        unit_ms=3_600_000,
        parse=_int_in(-1, _INT32_MAX),
    ),
    TimeAlias(
        name="log.roll.hours",
        topic_config="segment.ms",
        unit_ms=3_600_000,
        parse=_int_in(1, _INT32_MAX),
    ),
)
_ALIASES = {alias.name: alias for alias in LOG_TIME_ALIASES}


def log_setting_names(topic_config: str) -> tuple[str, ...]:
    """The broker-level names that set a topic config's default, the winning one first
    (``retention.ms``: ``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours``)."""
    aliases = (a.name for a in LOG_TIME_ALIASES if a.topic_config == topic_config)
    return (TOPIC_CONFIGS[topic_config].broker_name, *aliases)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """The effective configuration of one broker."""

    data_dir: Path
    node_id: int = 0  # Kafka: no default in KRaft mode; 0 for a single broker.
    listen: Listener = field(default_factory=lambda: Listener.parse(DEFAULT_LISTEN))
    advertised: Listener | None = None
    metrics_listen: Listener | None = field(
        default_factory=lambda: Listener.parse(DEFAULT_METRICS_LISTEN)
    )
    num_partitions: int = 1  # Kafka default.
    auto_create_topics_enable: bool = True  # Kafka default.
    socket_request_max_bytes: int = 104_857_600  # Kafka default: 100 MiB.
    connections_max_idle_ms: int = 600_000  # Kafka default: 10 minutes.
    log_flush_offset_checkpoint_interval_ms: int = 60_000  # Kafka default: 1 minute.
    log_retention_check_interval_ms: int = 300_000  # Kafka default: 5 minutes.
    log_cleaner_enable: bool = True  # Kafka default.
    log_cleaner_backoff_ms: int = 15_000  # Kafka default: 15 seconds.
    log_cleaner_threads: int = 1  # Kafka default (and riverbed's only choice).
    log_cleaner_dedupe_buffer_size: int = 134_217_728  # Kafka default: 128 MiB.
    log_cleaner_io_max_bytes_per_second: float = DOUBLE_MAX  # Kafka: Double.MAX_VALUE.
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
    log_defaults: TopicConfig = field(default_factory=TopicConfig)
    static_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Every recognised setting as the user gave it (file, --set, --listen), by Kafka name:
    what DescribeConfigs reports as STATIC_BROKER_CONFIG."""

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
        given: dict[str, str] = {}
        log_settings: dict[str, str] = {}
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
            elif name in topic_by_broker_name or name in _ALIASES:
                log_settings[name] = text
            elif name in ("log.dirs", "log.dir", "process.roles"):
                continue  # the data directory comes from --data-dir; one process, one role
            else:
                unknown.append(name)
                continue
            given[name] = text
        if listen is not None:
            values["listen"] = Listener.parse(listen)
            given["listeners"] = listen
        log_defaults = TopicConfig.from_properties(
            _log_overrides(log_settings, topic_by_broker_name), base=TopicConfig()
        )
        config = cls(
            data_dir=data_dir, log_defaults=log_defaults, static_settings=MappingProxyType(given)
        )
        return dataclasses.replace(config, **values), unknown  # type: ignore[arg-type]

    @property
    def metrics_listen_given(self) -> bool:
        """Whether ``metrics.listen`` was set (a broker that cannot serve the metrics where it
        was told to does not start; on the default address it starts without them)."""
        return "metrics.listen" in self.static_settings

    def advertised_listener(self, *, bound_port: int) -> Listener:
        """What clients are told to connect to: the advertised address, else the bound one."""
        if self.advertised is not None:
            return self.advertised
        host = self.listen.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"  # a wildcard is no address to connect to
        return Listener(host=host, port=bound_port)


def _log_overrides(
    log_settings: Mapping[str, str], topic_by_broker_name: Mapping[str, str]
) -> dict[str, str]:
    """Topic-level properties for the broker-level log settings given; each value is checked
    (and reported) under the name the user gave, and of synonyms the finest unit wins."""
    parsed: dict[str, str] = {}
    for name, text in log_settings.items():
        alias = _ALIASES.get(name)
        try:
            if alias is not None:
                parsed[name] = str(alias.to_ms(alias.parse(text)))
            else:
                TOPIC_CONFIGS[topic_by_broker_name[name]].parse(text)
                parsed[name] = text
        except (ValueError, InvalidConfigError) as e:
            raise ConfigError(f"{name}={text!r}: {e}") from None
    overrides: dict[str, str] = {}
    for topic_name in TOPIC_CONFIGS:
        winner = next((n for n in log_setting_names(topic_name) if n in parsed), None)
        if winner is not None:
            overrides[topic_name] = parsed[winner]
    return overrides


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
