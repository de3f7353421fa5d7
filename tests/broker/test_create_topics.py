"""CreateTopics naming a topic more than once: Kafka's answer, on the wire and through librdkafka.

Kafka's controller (``ControllerApis.createTopics``) creates none of a duplicated name's
entries, answers that name once with INVALID_REQUEST "Duplicate topic name." after the other
topics' results, and creates the other topics as usual.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode

from riverbed.broker import Broker
from tests.support.wire import WireClient

CREATE_TOPICS = 19
DUPLICATE = (ErrorCode.invalid_request, "Duplicate topic name.")


def _topic(name: str, partitions: int) -> CreatableTopic:
    return CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()
    )


def _create(broker: Broker, *topics: CreatableTopic, validate_only: bool = False) -> list:
    with WireClient(broker.bootstrap_servers) as client:
        answer = client.request(
            CREATE_TOPICS, 7, CreateTopicsRequest(topics=topics, validate_only=validate_only)
        )
    return [(t.name, t.error_code, t.error_message, t.num_partitions) for t in answer.topics]


def _partitions_by_topic(broker: Broker) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=30)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items()}


def test_a_duplicated_name_gets_one_answer_after_the_others_and_is_not_created(
    broker: Broker,
) -> None:
    answer = _create(broker, _topic("dup", 1), _topic("solo", 2), _topic("dup", 3))
    assert answer == [("solo", ErrorCode.none, None, 2), ("dup", *DUPLICATE, -1)]
    assert _partitions_by_topic(broker) == {"solo": 2}


def test_every_duplicated_name_is_answered_once_in_request_order(broker: Broker) -> None:
    answer = _create(
        broker, _topic("b", 1), _topic("a", 1), _topic("b", 1), _topic("a", 2), _topic("a", 1)
    )
    assert answer == [("b", *DUPLICATE, -1), ("a", *DUPLICATE, -1)]
    answer = _create(broker, _topic("v", 1), _topic("v", 1), validate_only=True)
    assert answer == [("v", *DUPLICATE, -1)]
    assert _partitions_by_topic(broker) == {}


def test_librdkafka_reports_the_duplicate_and_creates_the_other_topic(broker: Broker) -> None:
    # librdkafka (2.16) sends duplicates as they are and files each result under the first
    # request entry of its name. The duplicate goes last here on purpose: when a later entry
    # follows it ([dup, dup, other]) the result list librdkafka builds has a hole and
    # confluent-kafka crashes reading it, against Kafka as against riverbed.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    dup, solo = NewTopic("dup", num_partitions=1), NewTopic("solo", num_partitions=2)
    futures = admin.create_topics([dup, solo, dup])
    assert futures["solo"].result(timeout=30) is None
    with pytest.raises(KafkaException) as refused:
        futures["dup"].result(timeout=30)
    error = refused.value.args[0]
    assert (error.code(), error.str()) == (KafkaError.INVALID_REQUEST, "Duplicate topic name.")
    assert _partitions_by_topic(broker) == {"solo": 2}
