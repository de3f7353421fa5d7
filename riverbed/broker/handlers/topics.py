"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).

One broker holds every partition, so a replication factor above 1 cannot be met
(INVALID_REPLICATION_FACTOR) and manual replica assignments may name only this broker.

A CreateTopics that names a topic more than once creates none of those entries and answers
that name once, with INVALID_REQUEST "Duplicate topic name.", after the other topics'
results; the other topics are created as usual (Kafka's controller, below).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from riverbed.broker.errors import RequestRefused, error_code_for
from riverbed.broker.internal_topics import is_internal
from riverbed.broker.state import BrokerState
from riverbed.log import InvalidPartitionsError, LogError, TopicConfig
from riverbed.protocol import ErrorCode, Request

__all__ = ["create_partitions", "create_topics", "delete_topics"]

DEFAULT = -1  # num_partitions / replication_factor: "use the broker's default"
# Kafka's DescribeConfigs/CreateTopics config sources.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DEFAULT = 5


def _check_replicas(state: BrokerState, topic: Any) -> None:
    factor = topic.replication_factor
    if factor not in (DEFAULT, 1):
        raise RequestRefused(
            ErrorCode.invalid_replication_factor,
            f"replication factor {factor} is larger than the number of brokers (1)",
        )
    for assignment in topic.assignments:
        if list(assignment.broker_ids) != [state.config.node_id]:
            raise RequestRefused(
                ErrorCode.invalid_replica_assignment,
                f"partition {assignment.partition_index}: only broker "
                f"{state.config.node_id} exists",
            )


def _topic_result(
    name: str, code: ErrorCode = ErrorCode.none, message: str | None = None
) -> dict[str, Any]:
    """One CreatableTopicResult, with Kafka's defaults for what is not known."""
    return {
        "name": name,
        "topic_id": None,
        "error_code": code,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }


def _create_one(state: BrokerState, topic: Any, *, validate_only: bool) -> dict[str, Any]:
    result = _topic_result(topic.name)
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
                raise RequestRefused(ErrorCode.topic_already_exists, f"topic {topic.name!r} exists")
            effective = TopicConfig.from_properties(configs, base=state.config.log_defaults)
            topic_id = None
        else:
            created = state.logs.create_topic(topic.name, partitions=partitions, configs=configs)
            effective = state.logs.topic_config(topic.name)
            topic_id = created.topic_id
    except (RequestRefused, LogError, OSError) as e:
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
    # A name given twice is not created and gets one answer, after the others (librdkafka
    # refuses a response that names a topic twice): Kafka's ControllerApis.createTopics,
    # apache/kafka core/src/main/scala/kafka/server/ControllerApis.scala lines 396-405
    # (finding the duplicates), 415-423 (leaving them out of the creation) and 424-430 (their
    # results, added after the controller's) at commit 1eb7644. The ZooKeeper-era
    # KafkaApis.handleCreateTopicsRequest answered every entry ("Found multiple entries for
    # this topic.", KafkaApis.scala lines 1997-1999 there).
    named = Counter(topic.name for topic in body.topics)
    results = [
        _create_one(state, topic, validate_only=validate_only)
        for topic in body.topics
        if named[topic.name] == 1
    ]
    results += [
        _topic_result(name, ErrorCode.invalid_request, "Duplicate topic name.")
        for name, count in named.items()
        if count > 1
    ]
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
        else:
            state.metrics.forget_topic(name)
        results.append(result)
    state.purgatory.notify_all()
    return {"throttle_time": 0, "responses": results}


def _add_partitions(state: BrokerState, topic: Any, *, validate_only: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": topic.name,
        "error_code": ErrorCode.none,
        "error_message": None,
    }
    try:
        current = state.logs.topics().get(topic.name)
        if not validate_only:
            state.logs.create_partitions(topic.name, total=topic.count)
        elif current is None:
            state.logs.log(topic.name, 0)  # raises UnknownTopicOrPartitionError
        elif topic.count <= current.partitions:
            raise InvalidPartitionsError(
                f"topic has {current.partitions} partitions; {topic.count} is not more"
            )
    except (LogError, OSError) as e:
        result.update(error_code=error_code_for(e), error_message=str(e))
    return result


async def create_partitions(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    results = [
        _add_partitions(state, topic, validate_only=bool(body.validate_only))
        for topic in body.topics
    ]
    return {"throttle_time": 0, "results": results}
