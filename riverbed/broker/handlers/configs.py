"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are dynamic, as in Kafka: each topic keeps its overrides (``topics.json``,
:meth:`~riverbed.log.manager.LogManager.alter_topic_configs`) and every other config takes
the broker-level default. AlterConfigs replaces a topic's whole override set;
IncrementalAlterConfigs SETs, DELETEs (back to the default), APPENDs to or SUBTRACTs from a
list config (``cleanup.policy``). Both validate every value first (INVALID_CONFIG naming the
config and the problem) and with ``validate_only`` change nothing.

The broker's own settings are static (``riverbed broker --set`` or its config file):
DescribeConfigs reports them read-only and the alter requests refuse them with
INVALID_REQUEST; Kafka's dynamic broker configs are not implemented.

Synonyms (DescribeConfigs v1+) list where a topic config's value could come from, the one
that wins first, as Kafka's ConfigHelper does: the topic's override (DYNAMIC_TOPIC_CONFIG),
each broker-level name set on the broker (STATIC_BROKER_CONFIG, ``log.retention.ms`` before
``log.retention.minutes`` before ``log.retention.hours``), then Kafka's default under its
broker-level name (DEFAULT_CONFIG, ``log.retention.hours=168``). Kafka itself cuts a
retention.ms or segment.ms list down to nothing unless the ms name is set (its
``dropWhile`` on the first name), and then reports DEFAULT_CONFIG even for a value set by
``log.retention.hours``; riverbed keeps the whole list, so the source says where the value
came from.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from riverbed.broker.config import (
    BROKER_SETTINGS,
    LOG_TIME_ALIASES,
    BrokerConfig,
    Listener,
    log_setting_names,
)
from riverbed.broker.errors import RequestRefused, error_code_for
from riverbed.broker.state import BrokerState
from riverbed.log import (
    TOPIC_CONFIGS,
    InvalidConfigError,
    LogError,
    TopicConfig,
    UnknownTopicOrPartitionError,
)
from riverbed.protocol import ErrorCode, Request

__all__ = ["CONFIG_TYPES", "alter_configs", "describe_configs", "incremental_alter_configs"]

# Kafka's ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
BROKER_IS_STATIC = (
    "broker settings are static in riverbed: set them with `riverbed broker --set key=value` "
    "or its --config file, and restart the broker"
)


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource (the ones riverbed has)."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigType (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterOp(enum.IntEnum):
    """Kafka's AlterConfigOp.OpType."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


_TOPIC_TYPES: Mapping[str, ConfigType] = {
    # Kafka's LogConfig definitions.
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "segment.index.bytes": ConfigType.INT,
    "index.interval.bytes": ConfigType.INT,
    "max.message.bytes": ConfigType.INT,
    "message.timestamp.type": ConfigType.STRING,
    "cleanup.policy": ConfigType.LIST,
    "retention.ms": ConfigType.LONG,
    "retention.bytes": ConfigType.LONG,
    "compression.type": ConfigType.STRING,
    "delete.retention.ms": ConfigType.LONG,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "min.compaction.lag.ms": ConfigType.LONG,
    "max.compaction.lag.ms": ConfigType.LONG,
    "file.delete.delay.ms": ConfigType.LONG,
    "message.timestamp.before.max.ms": ConfigType.LONG,
    "message.timestamp.after.max.ms": ConfigType.LONG,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "min.insync.replicas": ConfigType.INT,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
}
_LONG_BROKER_SETTINGS = frozenset(
    {
        "connections.max.idle.ms",
        "offsets.retention.check.interval.ms",
        "log.retention.check.interval.ms",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
    }
)
CONFIG_TYPES: Mapping[str, ConfigType] = {
    **_TOPIC_TYPES,
    **{TOPIC_CONFIGS[name].broker_name: kind for name, kind in _TOPIC_TYPES.items()},
    **{alias.name: ConfigType.INT for alias in LOG_TIME_ALIASES},
    # Kafka's KafkaConfig definitions; the rest of BROKER_SETTINGS are ints.
    "listeners": ConfigType.STRING,
    "advertised.listeners": ConfigType.STRING,
    "metrics.listen": ConfigType.STRING,
    "log.dirs": ConfigType.STRING,
    "auto.create.topics.enable": ConfigType.BOOLEAN,
    "log.cleaner.enable": ConfigType.BOOLEAN,
    "log.cleaner.io.max.bytes.per.second": ConfigType.DOUBLE,
    **dict.fromkeys(_LONG_BROKER_SETTINGS, ConfigType.LONG),
}
"""Each config's Kafka type, by topic-level and broker-level name."""


def _config_type(name: str) -> ConfigType:
    return CONFIG_TYPES.get(name, ConfigType.INT)


# --- DescribeConfigs ------------------------------------------------------------------------


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source}


def _entry(
    name: str,
    value: str | None,
    synonyms: list[dict[str, Any]],
    *,
    read_only: bool,
    doc: str | None,
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": synonyms[0]["source"] if synonyms else ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": _config_type(name),
        "documentation": doc,
    }


def _kafka_default(topic_config: str) -> tuple[str, str]:
    """The broker-level name and value Kafka reports as a topic config's DEFAULT_CONFIG
    synonym: its coarsest name (``log.retention.hours=168`` for retention.ms)."""
    name = log_setting_names(topic_config)[-1]
    value = TopicConfig().to_properties()[topic_config]
    alias = next((a for a in LOG_TIME_ALIASES if a.name == name), None)
    if alias is not None:
        value = str(int(value) // alias.unit_ms)
    return name, value


def _topic_synonyms(
    config: BrokerConfig, topic_config: str, overrides: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Where a topic config's value can come from, the winner first (module doc)."""
    synonyms = []
    if topic_config in overrides:
        synonyms.append(
            _synonym(topic_config, overrides[topic_config], ConfigSource.DYNAMIC_TOPIC_CONFIG)
        )
    for name in log_setting_names(topic_config):
        if name in config.static_settings:
            value = config.static_settings[name]
            synonyms.append(_synonym(name, value, ConfigSource.STATIC_BROKER_CONFIG))
    synonyms.append(_synonym(*_kafka_default(topic_config), ConfigSource.DEFAULT_CONFIG))
    return synonyms


def _topic_entries(
    state: BrokerState, name: str, *, synonyms: bool, documented: bool
) -> list[dict[str, Any]]:
    metadata = state.logs.topics().get(name)
    if metadata is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    effective = state.logs.topic_config(name).to_properties()
    entries = []
    for key, value in sorted(effective.items()):
        chain = _topic_synonyms(state.config, key, metadata.configs)
        entry = _entry(
            key,
            value,
            chain,
            read_only=False,
            doc=TOPIC_CONFIGS[key].doc if documented else None,
        )
        entry["synonyms"] = chain if synonyms else []
        entries.append(entry)
    return entries


def _java_double(value: float) -> str:
    """``value`` as Java's Double.toString writes it (Kafka's DOUBLE configs):
    ``0.5``, ``15.0``, ``1.0E7``, ``1.7976931348623157E308``."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite: Kafka's doubles here are > 0
    text = "".join(map(str, digits))
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{exponent + len(text) - 1}"


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Listener):
        return f"PLAINTEXT://{value}"
    if isinstance(value, float):
        return _java_double(value)
    return str(value)


def _broker_values(config: BrokerConfig, advertised: Listener) -> dict[str, str | None]:
    """Every broker setting's effective value, by Kafka name."""
    values = {s.name: _text(getattr(config, s.attribute)) for s in BROKER_SETTINGS}
    values["advertised.listeners"] = _text(config.advertised or advertised)
    values["metrics.listen"] = "" if config.metrics_listen is None else str(config.metrics_listen)
    values["log.dirs"] = str(config.data_dir)
    for key, value in config.log_defaults.to_properties().items():
        names = log_setting_names(key)
        values[names[0]] = value  # also when set through an alias, unlike Kafka's null
        default_name, default_value = _kafka_default(key)
        for alias in names[1:]:
            fallback = default_value if alias == default_name else None
            values[alias] = config.static_settings.get(alias, fallback)
    return values


def _broker_entries(
    state: BrokerState, *, synonyms: bool, documented: bool
) -> list[dict[str, Any]]:
    config = state.config
    current = _broker_values(config, state.advertised)
    defaults = _broker_values(BrokerConfig(data_dir=config.data_dir), state.advertised)
    docs = {s.name: s.doc for s in BROKER_SETTINGS}
    docs.update({spec.broker_name: spec.doc for spec in TOPIC_CONFIGS.values()})
    docs["log.dirs"] = "The data directory (riverbed broker --data-dir)."
    given = set(config.static_settings) | {"log.dirs"}
    for key in TOPIC_CONFIGS:  # a value set through an alias is the broker's, not Kafka's
        names = log_setting_names(key)
        if given.intersection(names):
            given.add(names[0])
    entries = []
    for name, value in sorted(current.items()):
        chain = []
        if name in given:
            chain.append(_synonym(name, value, ConfigSource.STATIC_BROKER_CONFIG))
        if defaults[name] is not None:
            chain.append(_synonym(name, defaults[name], ConfigSource.DEFAULT_CONFIG))
        entry = _entry(
            name, value, chain, read_only=True, doc=docs.get(name) if documented else None
        )
        entry["synonyms"] = chain if synonyms else []
        entries.append(entry)
    return entries


def _answer_each(
    resources: Iterable[Any], serve: Callable[[Any], dict[str, Any]], **empty: Any
) -> list[dict[str, Any]]:
    """One answer per resource: ``serve``'s fields, or its error code and message (then the
    ``empty`` fields)."""
    answers = []
    for resource in resources:
        answer: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            **empty,
        }
        try:
            if resource.resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER):
                raise RequestRefused(
                    ErrorCode.invalid_request,
                    f"resource type {resource.resource_type} is not supported",
                )
            answer.update(serve(resource))
        except (RequestRefused, LogError, OSError) as e:
            answer.update(error_code=error_code_for(e), error_message=str(e))
        answers.append(answer)
    return answers


async def describe_configs(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    documented = bool(getattr(body, "include_documentation", False))
    synonyms = bool(getattr(body, "include_synonyms", False))

    def serve(resource: Any) -> dict[str, Any]:
        if resource.resource_type == RESOURCE_TOPIC:
            configs = _topic_entries(
                state, resource.resource_name, synonyms=synonyms, documented=documented
            )
        else:
            if resource.resource_name not in ("", str(state.config.node_id)):
                raise RequestRefused(
                    ErrorCode.invalid_request,
                    f"unexpected broker id {resource.resource_name!r}: "
                    f"this is broker {state.config.node_id}",
                )
            configs = _broker_entries(state, synonyms=synonyms, documented=documented)
        keys = resource.configuration_keys
        return {"configs": [c for c in configs if keys is None or c["name"] in keys]}

    return {"throttle_time": 0, "results": _answer_each(body.resources, serve, configs=[])}


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------


def _split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _incremental_overrides(
    current: Mapping[str, str], broker_defaults: Mapping[str, str], configs: Iterable[Any]
) -> dict[str, str]:
    """A topic's overrides after IncrementalAlterConfigs' operations, in request order."""
    overrides = dict(current)
    for config in configs:
        name, value = config.name, config.value
        if name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {name!r}")
        try:
            op = AlterOp(config.config_operation)
        except ValueError:
            raise RequestRefused(
                ErrorCode.invalid_request,
                f"{name}: unknown config operation {config.config_operation}",
            ) from None
        if op is AlterOp.DELETE:
            overrides.pop(name, None)
            continue
        if value is None:
            raise RequestRefused(ErrorCode.invalid_request, f"{name}: {op.name} needs a value")
        if op is AlterOp.SET:
            overrides[name] = value
            continue
        if _TOPIC_TYPES[name] is not ConfigType.LIST:
            raise InvalidConfigError(
                f"{name}: {op.name} is only for list configs (cleanup.policy); use SET"
            )
        items = _split_list(overrides.get(name, broker_defaults[name]))
        changes = _split_list(value)
        if op is AlterOp.APPEND:
            items += [item for item in changes if item not in items]
        else:
            items = [item for item in items if item not in changes]
        overrides[name] = ",".join(items)
    return overrides


def _alter_topic(
    state: BrokerState, resource: Any, *, incremental: bool, validate_only: bool
) -> None:
    name = resource.resource_name
    metadata = state.logs.topics().get(name)
    if metadata is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    named = Counter(config.name for config in resource.configs)
    twice = sorted(key for key, count in named.items() if count > 1)
    if twice:
        raise RequestRefused(ErrorCode.invalid_request, f"config {twice[0]!r} is named twice")
    broker_defaults = state.config.log_defaults
    if incremental:
        overrides = _incremental_overrides(
            metadata.configs, broker_defaults.to_properties(), resource.configs
        )
    else:  # the whole set: what is not named goes back to the default
        overrides = {c.name: c.value for c in resource.configs if c.value is not None}
    TopicConfig.from_properties(overrides, base=broker_defaults)  # InvalidConfigError
    if not validate_only:
        state.logs.alter_topic_configs(name, overrides)


def _alter(state: BrokerState, request: Request, *, incremental: bool) -> dict[str, Any]:
    body = request.body
    named = Counter((r.resource_type, r.resource_name) for r in body.resources)

    def serve(resource: Any) -> dict[str, Any]:
        if named[(resource.resource_type, resource.resource_name)] > 1:
            raise RequestRefused(ErrorCode.invalid_request, "each resource may appear only once")
        if resource.resource_type == RESOURCE_BROKER:
            raise RequestRefused(ErrorCode.invalid_request, BROKER_IS_STATIC)
        _alter_topic(
            state, resource, incremental=incremental, validate_only=bool(body.validate_only)
        )
        return {}

    return {"throttle_time": 0, "responses": _answer_each(body.resources, serve)}


async def alter_configs(state: BrokerState, request: Request) -> dict[str, Any]:
    """AlterConfigs: each topic's overrides become exactly the configs given."""
    return _alter(state, request, incremental=False)


async def incremental_alter_configs(state: BrokerState, request: Request) -> dict[str, Any]:
    """IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT on each topic's overrides."""
    return _alter(state, request, incremental=True)
