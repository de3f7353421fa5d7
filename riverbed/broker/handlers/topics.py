"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).

One broker holds every partition, so a replication factor above 1 cannot be met
(INVALID_REPLICATION_FACTOR) and manual replica assignments may name only this broker.
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.internal_topics import is_internal
from riverbed.broker.state import BrokerState
from riverbed.log import InvalidPartitionsError, LogError, TopicConfig
from riverbed.protocol import ErrorCode, Request

DEFAULT = -1  # num_partitions / replication_factor: "use the broker's default"
# Kafka's DescribeConfigs/CreateTopics config sources.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DEFAULT = 5


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check_replicas(state: BrokerState, topic: Any) -> None:
    factor = topic.replication_factor
    if factor not in (DEFAULT, 1):
        raise _Refused(
            ErrorCode.invalid_replication_factor,
            f"replication factor {factor} is larger than the number of brokers (1)",
        )
    for assignment in topic.assignments:
        if list(assignment.broker_ids) != [state.config.node_id]:
            raise _Refused(
                ErrorCode.invalid_replica_assignment,
                f"partition {assignment.partition_index}: only broker "
                f"{state.config.node_id} exists",
            )


def _create_one(state: BrokerState, topic: Any, *, validate_only: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": topic.name,
        "topic_id": None,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    partitions = topic.num_partitions
    if partitions == DEFAULT:
        partitions = len(topic.assignments) or state.config.num_partitions
    try:
        _check_replicas(state, topic)
        if partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1: {partitions}")
        if validate_only:
            if topic.name in state.logs.topics():
                raise _Refused(ErrorCode.topic_already_exists, f"topic {topic.name!r} exists")
            effective = TopicConfig.from_properties(configs, base=state.config.log_defaults)
            topic_id = None
        else:
            created = state.logs.create_topic(topic.name, partitions=partitions, configs=configs)
            effective = state.logs.topic_config(topic.name)
            topic_id = created.topic_id
    except _Refused as e:
        result.update(error_code=e.code, error_message=str(e))
        return result
    except (LogError, OSError) as e:
        result.update(error_code=error_code_for(e), error_message=str(e))
        return result
    result.update(
        topic_id=topic_id,
        num_partitions=partitions,
        replication_factor=1,
        configs=[
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": SOURCE_DYNAMIC_TOPIC if name in configs else SOURCE_DEFAULT,
                "is_sensitive": False,
            }
            for name, value in sorted(effective.to_properties().items())
        ],
    )
    return result


async def create_topics(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    validate_only = bool(getattr(body, "validate_only", False))
    seen: set[str] = set()
    results = []
    for topic in body.topics:
        if topic.name in seen:
            results.append(
                {
                    "name": topic.name,
                    "error_code": ErrorCode.invalid_request,
                    "error_message": "topic named twice in one request",
                }
            )
            continue
        seen.add(topic.name)
        results.append(_create_one(state, topic, validate_only=validate_only))
    return {"throttle_time": 0, "topics": results}


async def delete_topics(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    # v0-5 carry names in topic_names; v6 carries (name, topic_id) pairs in topics.
    if hasattr(body, "topic_names"):
        wanted = [(name, None) for name in body.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    results = []
    for name, topic_id in wanted:
        result: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        topics = state.logs.topics()
        if name is None:
            name = next((t.name for t in topics.values() if t.topic_id == topic_id), None)
            if name is None:
                result.update(error_code=ErrorCode.unknown_topic_id, error_message="unknown id")
                results.append(result)
                continue
            result["name"] = name
        if name in topics:
            result["topic_id"] = topics[name].topic_id
        if is_internal(name):
            result.update(
                error_code=ErrorCode.invalid_topic_exception,
                error_message="internal topics cannot be deleted",
            )
            results.append(result)
            continue
        try:
            state.logs.delete_topic(name)
        except (LogError, OSError) as e:
            result.update(error_code=error_code_for(e), error_message=str(e))
        results.append(result)
    state.purgatory.notify_all()
    return {"throttle_time": 0, "responses": results}


async def create_partitions(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    results = []
    for topic in body.topics:
        result: dict[str, Any] = {
            "name": topic.name,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        try:
            current = state.logs.topics().get(topic.name)
            if body.validate_only:
                if current is None:
                    state.logs.log(topic.name, 0)  # raises UnknownTopicOrPartitionError
                elif topic.count <= current.partitions:
                    raise InvalidPartitionsError(
                        f"topic has {current.partitions} partitions; {topic.count} is not more"
                    )
            else:
                state.logs.create_partitions(topic.name, total=topic.count)
        except (LogError, OSError) as e:
            result.update(error_code=error_code_for(e), error_message=str(e))
        results.append(result)
    return {"throttle_time": 0, "results": results}
