"""Sending commands and waiting for their results: what ``riverbed es send`` does, as a
Python API.

:meth:`CommandSender.send` completes a command document the way a client library would
(a ``command_id`` if it has none, ``ts`` now, ``expected_version`` null, ``data`` empty)
and produces it to the commands topic, partitioned as Kafka's Java clients do (murmur2 of
its compact JSON key: the partition whose processor holds the aggregate), with an
idempotent producer. :meth:`CommandSender.answers` returns the results of the commands sent
so far as they arrive (read_committed, so only results whose transaction committed); the
results consumer starts at the results topic's end as it was before the first command.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from riverbed.client.reading import ready
from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.errors import EventSourcingError, MessageError
from riverbed.eventsourcing.messages import dumps, loads_object, text_field

__all__ = ["CommandSender", "SenderError"]


class SenderError(EventSourcingError):
    """No broker, no commands topic, or a command that was not delivered."""


class CommandSender:
    """Sends commands of ``kind`` to the brokers at ``bootstrap`` (module docstring)."""

    def __init__(
        self,
        kind: AggregateType[Any, Any, Any],
        bootstrap: str,
        *,
        timeout_s: float = 30,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self.timeout_s = timeout_s
        settings = {"bootstrap.servers": bootstrap, **(extra or {})}
        self.pending: Counter[str] = Counter()
        """Command id -> how many of its results are still to come (one a send)."""
        self.failures: list[str] = []
        self._producer = Producer(
            {
                **settings,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",  # Kafka's Java clients' (murmur2)
                "linger.ms": 5,
            }
        )
        self._results = Consumer(
            {
                **settings,
                "group.id": "riverbed-es-send",  # assign() only
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 20,
            }
        )
        topics = self.kind.topics
        try:
            found = self._results.list_topics(timeout=timeout_s).topics
        except KafkaException as e:
            self.close()
            raise SenderError(f"no broker at {bootstrap}: {e.args[0].str()}") from None
        missing = [t for t in (topics.commands, topics.results) if t not in found]
        if missing:
            self.close()
            raise SenderError(
                f"no topic {', '.join(missing)} at {bootstrap}: start the command processor "
                f"(riverbed es run {kind.name}) first, it creates them"
            )
        ends = []
        for partition in found[topics.results].partitions:
            _, high = self._results.get_watermark_offsets(
                TopicPartition(topics.results, partition), timeout=timeout_s
            )
            ends.append(TopicPartition(topics.results, partition, high))
        self._results.assign(ends)

    def send(self, document: Mapping[str, Any]) -> str:
        """Produce one command (completed as the module docstring says); its command id.
        A :class:`~riverbed.eventsourcing.errors.MessageError` if it names no aggregate."""
        command = {
            "command_id": str(uuid.uuid4()),
            "user_id": None,
            "expected_version": None,
            "data": {},
            "ts": int(time.time() * 1000),
            **document,
        }
        aggregate_id = text_field(command, self.kind.format.id_field)
        command_id = text_field(command, "command_id")
        self.pending[command_id] += 1
        self._producer.produce(
            self.kind.topics.commands,
            key=self.kind.format.key(aggregate_id),
            value=dumps(command),
            on_delivery=self._delivered,
        )
        self._producer.poll(0)
        return command_id

    def answers(self, timeout_s: float) -> list[dict[str, Any]]:
        """Results of commands sent and not yet answered among the results that have arrived
        (waiting up to ``timeout_s`` for one if none has); as many for a command id as it
        was sent: the processor answers each."""
        self._producer.poll(0)
        found: list[dict[str, Any]] = []
        for message in ready(self._results, 1000, timeout_s):
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise SenderError(f"results: {error.str()}")
                continue
            try:
                result = loads_object(message.value(), "result")
            except MessageError:
                continue  # not a result: nobody's answer
            command_id = result.get("command_id")
            if isinstance(command_id, str) and self.pending[command_id] > 0:
                self.pending[command_id] -= 1
                if not self.pending[command_id]:
                    del self.pending[command_id]
                found.append(result)
        if self.failures:
            raise SenderError(f"commands not delivered: {'; '.join(self.failures[:3])}")
        return found

    def flush(self) -> None:
        if self._producer.flush(self.timeout_s):
            raise SenderError(f"commands not delivered within {self.timeout_s} s")

    def close(self) -> None:
        self._results.close()

    def _delivered(self, error: Any, message: Message) -> None:
        if error is not None:
            self.failures.append(error.str())
