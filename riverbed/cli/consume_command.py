"""``riverbed consume``: print a topic's records, like kafka-console-consumer (and kcat -C).

Where to start, per partition: the end (default), ``--from-beginning``, ``--from-timestamp MS``
(the first record at or after it, by ListOffsets), or ``--offset N|earliest|latest`` with
``--partition N``. Without ``--group`` the tool assigns itself the partitions (all of them,
or ``--partition``) and commits nothing; with ``--group G`` it subscribes as a member of G
and commits its position, starting where G left off (``auto.offset.reset`` decides otherwise).

When to stop: ``--max-messages N``, ``--exit-at-end`` (every assigned partition has reached
its end, via librdkafka's partition EOF events), ``--timeout-ms MS`` with no record, or
Ctrl-C (exit 130). How to print: see ``riverbed.cli.formatting``. "Processed a total of N
messages" goes to stderr at the end, as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from riverbed.cli.arguments import (
    add_assignments,
    add_client_properties,
    add_command,
    add_connection_arguments,
    client_properties,
    non_negative_int,
    parse_assignments,
    positive_int,
)
from riverbed.cli.confluent import (
    REQUEST_TIMEOUT_S,
    ErrorLog,
    create_client,
    describe_kafka_error,
    kafka_errors,
    require_topic,
)
from riverbed.cli.errors import CliError
from riverbed.cli.formatting import (
    DEFAULT_FORMAT,
    Formatter,
    compile_format,
    compile_properties,
)

__all__ = ["add_parser"]

# How long one poll() waits; bounds how late --timeout-ms and Ctrl-C are noticed.
POLL_INTERVAL_S = 0.2


def add_parser(commands: Any) -> None:
    parser = add_command(
        commands,
        "consume",
        "print a topic's records (like kafka-console-consumer)",
        "Print the records of one topic to stdout, one formatted record at a time.",
    )
    add_connection_arguments(parser)
    parser.add_argument("--topic", required=True)
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at each partition's first record"
    )
    start.add_argument(
        "--offset",
        metavar="N|earliest|latest",
        type=_offset,
        help="where to start in --partition (earliest/latest also work for all partitions)",
    )
    start.add_argument(
        "--from-timestamp",
        type=non_negative_int,
        metavar="MS",
        help="start at the first record with a timestamp >= MS (epoch milliseconds)",
    )
    parser.add_argument("--partition", type=non_negative_int, help="consume only this partition")
    parser.add_argument("--group", metavar="G", help="consume as a member of consumer group G")
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed reads only committed transactions, up to the last stable offset "
        "(default read_uncommitted, as Kafka's console consumer)",
    )
    parser.add_argument(
        "--max-messages", type=positive_int, metavar="N", help="exit after N records"
    )
    parser.add_argument(
        "--exit-at-end",
        action="store_true",
        help="exit once every partition is read to its end",
    )
    parser.add_argument(
        "--timeout-ms", type=positive_int, metavar="MS", help="exit after MS without a record"
    )
    parser.add_argument(
        "--format",
        metavar="FMT",
        help=f"kcat-style format: %%t %%p %%o %%k %%K %%s %%S %%T %%h %%%%, \\n \\t "
        f"(default {DEFAULT_FORMAT.replace('%', '%%')})",
    )
    add_assignments(
        parser,
        "--property",
        "Kafka formatter property: print.key, print.value, print.partition, print.offset, "
        "print.timestamp, print.headers, key.separator, line.separator, headers.separator, "
        "headers.key.separator, null.literal (repeatable)",
        metavar="NAME=VALUE",
    )
    add_client_properties(parser, "consumer")
    parser.set_defaults(run=kafka_errors(run))


def _offset(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number, earliest or latest: {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _formatter(args: argparse.Namespace) -> Formatter:
    properties = parse_assignments(args.property, flag="--property")
    if properties and args.format is not None:
        raise CliError("use either --format or --property, not both", exit_code=2)
    if properties:
        return compile_properties(properties)
    return compile_format(args.format if args.format is not None else DEFAULT_FORMAT)


def _check_usage(args: argparse.Namespace) -> None:
    if isinstance(args.offset, int) and args.partition is None:
        raise CliError("--offset N needs --partition", exit_code=2)
    if args.group is not None and (args.partition is not None or args.offset is not None):
        raise CliError(
            "--group takes the group's partitions; it cannot be used with --partition or --offset",
            exit_code=2,
        )


def run(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    """Consume until a stop condition; exit 0, 1 on a broker/topic failure, 130 on Ctrl-C."""
    _check_usage(args)
    formatter = _formatter(args)
    settings = {
        # Without --group nothing is committed; librdkafka still insists on a group.id.
        "group.id": args.group or f"riverbed-console-consumer-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": "true" if args.group else "false",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.partition.eof": "true" if args.exit_at_end else "false",
        "isolation.level": args.isolation_level,
        **client_properties(args, "consumer"),
    }
    consumer, errors = create_client(Consumer, args, settings)
    session = _Session(
        consumer=consumer,
        args=args,
        formatter=formatter,
        errors=errors,
        out=stdout or sys.stdout.buffer,
    )
    try:
        session.start()
        session.loop()
    except BrokenPipeError:  # e.g. `riverbed consume ... | head`: the reader is gone
        _silence_stdout()
    finally:
        if session.started:
            print(f"Processed a total of {session.count} messages", file=sys.stderr)
        consumer.close()
    return 0


@dataclass(slots=True, kw_only=True)
class _Session:
    """One consumer's run: its assignment, EOF bookkeeping and stop conditions (mutable; the
    group callbacks update it from ``poll``, on the calling thread)."""

    consumer: Consumer
    args: argparse.Namespace
    formatter: Formatter
    errors: ErrorLog
    out: BinaryIO
    count: int = 0
    started: bool = False
    assigned: set[int] = field(default_factory=set)
    at_end: set[int] = field(default_factory=set)
    group_joined: bool = False

    def start(self) -> None:
        """Check the topic exists, then assign its partitions or join the group."""
        args = self.args
        topic = require_topic(self.consumer, args, self.errors, partition=args.partition)
        partitions = sorted(topic.partitions) if args.partition is None else [args.partition]
        self.started = True
        if args.group is not None:
            self.consumer.subscribe(
                [args.topic], on_assign=self._on_assign, on_revoke=self._on_revoke
            )
            return
        positions = self._start_positions([TopicPartition(args.topic, p) for p in partitions])
        self.assigned = set(partitions)
        self.consumer.assign(positions)

    def _start_positions(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        args = self.args
        if args.from_timestamp is not None:
            return self._offsets_for_time(partitions, args.from_timestamp)
        if args.from_beginning or args.offset == "earliest":
            offset = OFFSET_BEGINNING
        elif isinstance(args.offset, int):
            offset = args.offset
        else:
            offset = OFFSET_END
        return [TopicPartition(tp.topic, tp.partition, offset) for tp in partitions]

    def _offsets_for_time(
        self, partitions: list[TopicPartition], timestamp_ms: int
    ) -> list[TopicPartition]:
        query = [TopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in partitions]
        try:
            found = self.consumer.offsets_for_times(query, timeout=REQUEST_TIMEOUT_S)
        except KafkaException as e:
            raise CliError(f"cannot look up offsets by time: {describe_kafka_error(e)}") from None
        # -1: no record at or after the timestamp; start at the end, for records yet to come.
        return [
            TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
            for tp in found
        ]

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.group_joined = True
        self.assigned = {tp.partition for tp in partitions}
        self.at_end &= self.assigned
        if self.args.from_timestamp is not None:
            consumer.assign(self._offsets_for_time(partitions, self.args.from_timestamp))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned -= {tp.partition for tp in partitions}

    def loop(self) -> None:
        args = self.args
        idle_since = started = time.monotonic()
        warned = False
        while True:
            message = self.consumer.poll(POLL_INTERVAL_S)
            if not warned and args.group is not None and not self.group_joined:
                warned = self._warn_if_not_joined(waited_s=time.monotonic() - started)
            fatal = self.errors.fatal()
            if fatal is not None:
                raise CliError(describe_kafka_error(fatal))
            if message is None or message.error() is not None:
                # No record: an EOF event, a non-fatal error or nothing at all.
                if message is not None and self._at_end_of_all(message):
                    return
                if args.timeout_ms and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    return
                continue
            idle_since = time.monotonic()
            self.at_end.discard(message.partition() or 0)
            self.out.write(self.formatter(message))
            self.out.flush()
            self.count += 1
            if args.max_messages is not None and self.count >= args.max_messages:
                return

    def _at_end_of_all(self, event: Any) -> bool:
        """Record a partition EOF event; True when --exit-at-end should stop now."""
        error = event.error()
        if error.code() != KafkaError._PARTITION_EOF:
            self._on_error(error)
            return False
        self.at_end.add(event.partition() or 0)
        return bool(self.args.exit_at_end and self.assigned and self.at_end >= self.assigned)

    def _warn_if_not_joined(self, *, waited_s: float) -> bool:
        """Kafka's tool waits silently for its group; say once why nothing is printed."""
        if waited_s * 1000 < self.args.connect_timeout_ms:
            return False
        print(
            f"riverbed consume: still waiting to join group {self.args.group!r} after "
            f"{waited_s:.0f} s (does the broker serve consumer groups?)",
            file=sys.stderr,
        )
        return True

    def _on_error(self, error: KafkaError) -> None:
        if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise CliError(f"topic {self.args.topic!r} does not exist")
        if error.fatal():
            raise CliError(describe_kafka_error(error))
        print(f"riverbed consume: {describe_kafka_error(error)}", file=sys.stderr)


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so Python's exit-time flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
