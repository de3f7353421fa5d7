"""A consume-transform-produce worker, exactly once with librdkafka's transactions.

Run as ``python tests/support/eos_worker.py BOOTSTRAP INPUT OUTPUT``: reads INPUT as a member
of group ``eos`` (read_committed, static membership so a restart takes over at once), and for
every batch, in one transaction, writes ``out:<value>`` to OUTPUT and commits the consumed
offsets with ``send_offsets_to_transaction``. Prints ``open N`` once a transaction's output
and offsets are written (its commit follows 50 ms later) and ``committed N`` after the
commit. The tests kill it with SIGKILL and start it again.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition


def main(bootstrap: str, input_topic: str, output_topic: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos",
            "group.instance.id": "eos-worker-1",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "eos-worker", "linger.ms": 1}
    )
    producer.init_transactions(30)  # fences and aborts a killed predecessor's transaction
    consumer.subscribe([input_topic])
    committed = 0
    while True:
        messages = [m for m in consumer.consume(num_messages=37, timeout=0.2) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        next_offsets: dict[tuple[str, int], int] = {}
        for message in messages:
            value = message.value() or b""
            producer.produce(output_topic, key=message.key(), value=b"out:" + value)
            next_offsets[(message.topic(), message.partition())] = message.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in next_offsets.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.flush(30)
        print(f"open {committed + len(messages)}", flush=True)
        time.sleep(0.05)  # a kill after "open" lands inside the transaction
        producer.commit_transaction(30)
        committed += len(messages)
        print(f"committed {committed}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
