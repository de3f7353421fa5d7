"""DescribeCluster (60) and DescribeConfigs (32): what this broker is and how it is set."""

from __future__ import annotations

from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED
from riverbed.broker.state import BrokerState
from riverbed.log.config import TOPIC_CONFIGS
from riverbed.log.errors import LogError
from riverbed.protocol import ErrorCode, Request

# DescribeConfigs resource types and config sources (Kafka's ConfigResource.Type and
# DescribeConfigsResponse.ConfigSource).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


async def describe_cluster(state: BrokerState, request: Request) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": 1,
        "cluster_id": state.cluster_id,
        "controller_id": state.config.node_id,
        "brokers": [
            {
                "broker_id": state.config.node_id,
                "host": state.advertised.host,
                "port": state.advertised.port,
                "rack": None,
            }
        ],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _entry(
    name: str, value: str | None, source: int, doc: str, *, documented: bool
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        # Changing configs arrives with AlterConfigs; until then every value is fixed.
        "read_only": True,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": 0,
        "documentation": doc if documented else None,
    }


def _topic_configs(state: BrokerState, name: str, *, documented: bool) -> list[dict[str, Any]]:
    effective = state.logs.topic_config(name).to_properties()  # unknown topic: raises
    overrides = state.logs.topics()[name].configs
    broker_set = state.config.log_defaults.to_properties()
    default_values = type(state.config.log_defaults)().to_properties()
    entries = []
    for key, value in sorted(effective.items()):
        if key in overrides:
            source = SOURCE_DYNAMIC_TOPIC
        elif broker_set.get(key) != default_values.get(key):
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        doc = TOPIC_CONFIGS[key].doc if key in TOPIC_CONFIGS else ""
        entries.append(_entry(key, value, source, doc, documented=documented))
    return entries


def _broker_configs(state: BrokerState, *, documented: bool) -> list[dict[str, Any]]:
    config = state.config
    values = {
        "node.id": str(config.node_id),
        "broker.id": str(config.node_id),
        "listeners": f"PLAINTEXT://{config.listen}",
        "advertised.listeners": f"PLAINTEXT://{state.advertised}",
        "num.partitions": str(config.num_partitions),
        "auto.create.topics.enable": str(config.auto_create_topics_enable).lower(),
        "socket.request.max.bytes": str(config.socket_request_max_bytes),
        "connections.max.idle.ms": str(config.connections_max_idle_ms),
        "log.dirs": str(config.data_dir),
    }
    for key, value in config.log_defaults.to_properties().items():
        values[TOPIC_CONFIGS[key].broker_name] = value
    return [
        _entry(key, value, SOURCE_STATIC_BROKER, "", documented=documented)
        for key, value in sorted(values.items())
    ]


async def describe_configs(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    documented = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        try:
            if resource.resource_type == RESOURCE_TOPIC:
                configs = _topic_configs(state, resource.resource_name, documented=documented)
            elif resource.resource_type == RESOURCE_BROKER:
                if resource.resource_name not in ("", str(state.config.node_id)):
                    raise _NotThisBroker(resource.resource_name)
                configs = _broker_configs(state, documented=documented)
            else:
                result.update(
                    error_code=ErrorCode.invalid_request,
                    error_message=f"resource type {resource.resource_type} is not supported",
                )
                results.append(result)
                continue
        except _NotThisBroker as e:
            result.update(error_code=ErrorCode.invalid_request, error_message=str(e))
        except (LogError, OSError) as e:
            result.update(error_code=error_code_for(e), error_message=str(e))
        else:
            keys = resource.configuration_keys
            result["configs"] = [c for c in configs if keys is None or c["name"] in keys]
        results.append(result)
    return {"throttle_time": 0, "results": results}


class _NotThisBroker(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"broker {name!r} is not this broker")
