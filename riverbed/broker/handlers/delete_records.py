"""DeleteRecords (21): move partitions' log start offsets up (``kafka-delete-records.sh``).

Each partition's log start offset moves up to the offset asked for (-1: the high
watermark), durably, and never down; the answer's ``low_watermark`` is the new log start
offset. Fetches below it then get OFFSET_OUT_OF_RANGE and ListOffsets "earliest" answers
it. With one broker there are no followers to wait for, so the request's timeout is not used.

As in Kafka: an offset past the high watermark (or below -1) is OFFSET_OUT_OF_RANGE, a topic
whose cleanup.policy lacks ``delete`` refuses with POLICY_VIOLATION, and internal topics
refuse with INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.internal_topics import is_internal
from riverbed.broker.state import BrokerState
from riverbed.log import LogError, retention
from riverbed.protocol import ErrorCode, Request

__all__ = ["delete_records"]

UNKNOWN_LOW_WATERMARK = -1  # Kafka's DeleteRecordsResponse.INVALID_LOW_WATERMARK


def _delete_one(state: BrokerState, topic: str, partition: int, offset: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "partition_index": partition,
        "low_watermark": UNKNOWN_LOW_WATERMARK,
        "error_code": ErrorCode.none,
    }
    try:
        partition_log = state.logs.log(topic, partition)  # unknown: UNKNOWN_TOPIC_OR_PARTITION
        if is_internal(topic):
            result["error_code"] = ErrorCode.invalid_topic_exception
        elif "delete" not in partition_log.config.cleanup_policy.split(","):
            result["error_code"] = ErrorCode.policy_violation
        else:
            result["low_watermark"] = retention.delete_records(partition_log, offset)
    except (LogError, OSError) as e:
        result["error_code"] = error_code_for(e)
    return result


async def delete_records(state: BrokerState, request: Request) -> dict[str, Any]:
    topics = []
    for topic in request.body.topics:
        partitions = [
            _delete_one(state, topic.name, wanted.partition_index, wanted.offset)
            for wanted in topic.partitions
        ]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
