"""``riverbed produce``: one record per stdin line, like kafka-console-producer.

Each line (without its line ending) becomes a record's value. Kafka's LineMessageReader
properties split a line further, all given as ``--property NAME=VALUE``:

- ``parse.key=true``: ``KEY<key.separator>VALUE``, ``key.separator`` defaults to a tab;
  ``--key-separator SEP`` is short for both;
- ``parse.headers=true``: ``H1:V1,H2:V2<headers.delimiter>...`` before the key/value, with
  ``headers.delimiter`` (tab), ``headers.separator`` (``,``) and ``headers.key.separator``
  (``:``);
- ``null.marker=M``: a key, value or header value equal to M is sent as null;
- ``ignore.error=true``: a line without the key separator is sent whole as the value with a
  null key, instead of stopping with an error.

``--header K=V`` (repeatable) adds a header to every record. Separators understand ``\\t``,
``\\n``, ``\\r`` and ``\\\\``. Records are sent as they are read and flushed at EOF; any record
that is not delivered is reported on stderr and makes the exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO

from confluent_kafka import KafkaError, KafkaException, Producer

from riverbed.cli.arguments import (
    add_assignments,
    add_client_properties,
    add_command,
    add_connection_arguments,
    add_number,
    client_properties,
    non_negative_int,
    parse_assignments,
    positive_int,
)
from riverbed.cli.confluent import (
    ErrorLog,
    create_client,
    describe_kafka_error,
    kafka_errors,
    require_topic,
)
from riverbed.cli.errors import CliError
from riverbed.cli.properties import boolean, unescape, with_defaults

__all__ = ["LineFormat", "Record", "add_parser"]

# How long a record may wait for delivery (librdkafka message.timeout.ms). librdkafka's default
# is 300 s and Kafka's delivery.timeout.ms 120 s; an interactive tool should give up sooner.
DEFAULT_DELIVERY_TIMEOUT_MS = 30_000
# At most this many delivery failures are printed one by one; the rest only count.
MAX_REPORTED_FAILURES = 10

# Kafka's LineMessageReader defaults (kafka.tools.consumer... LineMessageReader).
LINE_PROPERTIES: dict[str, str] = {
    "parse.key": "false",
    "key.separator": "\\t",
    "parse.headers": "false",
    "headers.delimiter": "\\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.marker": "",
    "ignore.error": "false",
}

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[Header]


@dataclass(frozen=True, slots=True, kw_only=True)
class LineFormat:
    """How one input line splits into headers, key and value (Kafka's LineMessageReader)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> LineFormat:
        settings = with_defaults(properties, LINE_PROPERTIES)

        def flag(name: str) -> bool:
            return boolean(settings, name)

        def separator(name: str) -> bytes:
            value = unescape(settings[name]).encode()
            if not value:
                raise CliError(f"--property {name} must not be empty", exit_code=2)
            return value

        marker = unescape(settings["null.marker"]).encode()
        return cls(
            parse_key=flag("parse.key"),
            key_separator=separator("key.separator"),
            parse_headers=flag("parse.headers"),
            headers_delimiter=separator("headers.delimiter"),
            headers_separator=separator("headers.separator"),
            headers_key_separator=separator("headers.key.separator"),
            null_marker=marker or None,
            ignore_error=flag("ignore.error"),
        )

    def parse(self, line: bytes, *, line_number: int) -> Record:
        """One line, without its line ending → a record; a malformed line raises CliError."""
        headers: list[Header] = []
        rest = line
        if self.parse_headers:
            header_text, found, after = rest.partition(self.headers_delimiter)
            if not found:
                raise CliError(
                    f"line {line_number}: no headers delimiter {_show(self.headers_delimiter)}"
                )
            rest = after
            headers = self._headers(header_text, line_number=line_number)
        if not self.parse_key:
            return Record(key=None, value=self._nullable(rest), headers=headers)
        key, found, value = rest.partition(self.key_separator)
        if not found:
            if self.ignore_error:
                return Record(key=None, value=self._nullable(rest), headers=headers)
            raise CliError(f"line {line_number}: no key separator {_show(self.key_separator)}")
        return Record(key=self._nullable(key), value=self._nullable(value), headers=headers)

    def _headers(self, text: bytes, *, line_number: int) -> list[Header]:
        if not text:
            return []
        headers: list[Header] = []
        for pair in text.split(self.headers_separator):
            name, found, value = pair.partition(self.headers_key_separator)
            if not found:
                raise CliError(
                    f"line {line_number}: header {pair.decode(errors='replace')!r} has no "
                    f"key separator {_show(self.headers_key_separator)}"
                )
            headers.append((name.decode(errors="replace"), self._nullable(value)))
        return headers

    def _nullable(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data


def _show(separator: bytes) -> str:
    return repr(separator.decode(errors="replace"))


def add_parser(commands: Any) -> None:
    parser = add_command(
        commands,
        "produce",
        "send stdin lines as records (like kafka-console-producer)",
        "Send each stdin line as one record; see --property for keys and headers.",
    )
    add_connection_arguments(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--partition", type=non_negative_int, help="send every record to this partition"
    )
    add_assignments(
        parser,
        "--property",
        "a LineMessageReader property: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, null.marker, "
        "ignore.error (repeatable)",
        metavar="NAME=VALUE",
    )
    parser.add_argument(
        "--key-separator", metavar="SEP", help="lines are KEY<SEP>VALUE (sets parse.key=true)"
    )
    add_assignments(parser, "--header", "add this header to every record (repeatable)")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="all")
    parser.add_argument(
        "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none"
    )
    add_number(
        parser,
        "--delivery-timeout-ms",
        positive_int,
        DEFAULT_DELIVERY_TIMEOUT_MS,
        "give up on a record after this long",
        metavar="MS",
    )
    add_client_properties(parser, "producer")
    parser.set_defaults(run=kafka_errors(run))


def line_format(args: argparse.Namespace) -> LineFormat:
    properties = parse_assignments(args.property, flag="--property")
    if args.key_separator is not None:
        properties["parse.key"] = "true"
        properties["key.separator"] = args.key_separator
    return LineFormat.from_properties(properties)


class _Deliveries:
    """Counts delivery reports (served by ``poll``/``flush``) and reports failures on stderr."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0

    def failure(self, line_number: int, reason: str) -> None:
        self.failed += 1
        if self.failed <= MAX_REPORTED_FAILURES:
            print(f"riverbed produce: line {line_number} not delivered: {reason}", file=sys.stderr)

    def callback(self, line_number: int) -> Any:
        def on_delivery(error: KafkaError | None, _message: Any) -> None:
            if error is not None:
                self.failure(line_number, describe_kafka_error(error))

        return on_delivery


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    """Read stdin to EOF, send each line, flush; exit 1 if any record was not delivered."""
    reader = line_format(args)
    header_assignments = parse_assignments(args.header, flag="--header")
    extra_headers: list[Header] = [(k, v.encode()) for k, v in header_assignments.items()]
    settings = {
        "acks": args.acks,
        "compression.type": args.compression,
        "message.timeout.ms": str(args.delivery_timeout_ms),
        **client_properties(args, "producer"),
    }
    producer, errors = create_client(Producer, args, settings)
    require_topic(producer, args, errors, partition=args.partition)
    deliveries = _Deliveries()
    try:
        _produce_lines(
            producer, args, reader, extra_headers, deliveries, errors, stdin or sys.stdin.buffer
        )
    except KeyboardInterrupt:
        producer.flush(args.delivery_timeout_ms / 1000)
        raise
    except CliError:
        producer.flush(args.delivery_timeout_ms / 1000)  # what was read before the bad line
        raise
    undelivered = producer.flush(args.delivery_timeout_ms / 1000)
    deliveries.failed += undelivered
    if deliveries.failed:
        raise CliError(f"{deliveries.failed} of {deliveries.sent} records not delivered")
    return 0


def _produce_lines(
    producer: Producer,
    args: argparse.Namespace,
    reader: LineFormat,
    extra_headers: list[Header],
    deliveries: _Deliveries,
    errors: ErrorLog,
    lines: Iterable[bytes],
) -> None:
    for line_number, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        line = line[:-1] if line.endswith(b"\r") else line
        record = reader.parse(line, line_number=line_number)
        options: dict[str, Any] = {
            "key": record.key,
            "value": record.value,
            "headers": record.headers + extra_headers or None,
            "on_delivery": deliveries.callback(line_number),
        }
        if args.partition is not None:
            options["partition"] = args.partition
        deliveries.sent += 1
        while True:
            try:
                producer.produce(args.topic, **options)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
            except KafkaException as e:
                deliveries.failure(line_number, describe_kafka_error(e))
                break
        producer.poll(0)
        fatal = errors.fatal()  # e.g. an idempotent producer that was fenced
        if fatal is not None:
            raise CliError(describe_kafka_error(fatal))
