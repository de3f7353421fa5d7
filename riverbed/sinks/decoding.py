"""Reading a sink's input: records become changes (:func:`~riverbed.sinks.changes.change_of`),
and changes a batch for the store (its :class:`~riverbed.sinks.store.Stager`).

A :class:`Decoder` does it with one consumer (``read_committed``; assigned, not subscribed:
a store has one writer) over the partitions it is given, from the offsets it is given, at
most ``max_batch`` records a batch. The runner uses one in its own process, or, with
``decoders`` > 1, one per :class:`DecoderProcesses` child, each with a share of the
partitions, so that decoding runs on several cores and the sink's process only writes: a
key is in one partition, so a batch's fold per key is the same in any of them. A child is
``python -m riverbed.sinks.decoding FD``: it gets its work over the socket ``FD`` (see
:func:`_child`), sends each batch, and has at most one more read while the sink has not
taken the one before. It ignores SIGINT and SIGTERM (the sink stops it), and ends when the
sink says so or its socket closes: a sink killed with -9 leaves no decoder behind.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from riverbed.client.reading import ready
from riverbed.sinks.changes import CDC_HEADER, NotAChangelog, SinkError, change_of
from riverbed.sinks.store import Stager

__all__ = [
    "COLLECT_EVERY",
    "Batch",
    "Decoder",
    "DecoderProcesses",
    "SinkConfig",
    "consumer_settings",
    "fewer_collections",
    "kafka_text",
    "share",
]

_LIBRDKAFKA = logging.getLogger("riverbed.sinks.librdkafka")
_WAIT_S = 0.2
_CHILD_WAIT_S = 0.05
"""A child's wait for records, and so for being told to stop when it has none."""
COLLECT_EVERY = 50_000
_STOP = "stop"
_TAKEN = "taken"


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkConfig:
    bootstrap: str
    topics: tuple[str, ...]
    group_id: str
    from_beginning: bool = False
    """Start every partition at its beginning, whatever positions the store holds."""
    until_caught_up: bool = False
    """Stop once every partition has been applied to its end (for scripts and rebuilds)."""
    max_batch: int = 5_000
    decoders: int = 1
    """Processes that read and decode (one per share of the partitions, at most one per
    partition); 1: the sink's own process does."""
    timeout_s: float = 30.0
    settings: dict[str, Any] | None = None
    """More librdkafka settings (security, ...)."""


@dataclass(frozen=True, slots=True)
class Batch:
    staged: Any
    """What the stager took."""
    records: int
    positions: dict[tuple[str, int], int]
    """Per partition read, the offset after the batch's last record."""


def consumer_settings(config: SinkConfig) -> dict[str, Any]:
    return {
        "bootstrap.servers": config.bootstrap,
        "group.id": config.group_id,
        "logger": _LIBRDKAFKA,
        **(config.settings or {}),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its queue is
        # full, which a sink behind its topics fills again and again; and a partition's end
        # is known once a fetch at it comes back empty, after fetch.wait.max.ms (500 ms):
        # 5 ms when that end is where the sink stops.
        "fetch.queue.backoff.ms": 10,
        **({"fetch.wait.max.ms": 5} if config.until_caught_up else {}),
    }


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Python's cycle collector, while a sink reads or writes, at its first generation every
    :data:`COLLECT_EVERY` allocations instead of 700, and its last one rarely: a batch's
    records, changes and staged rows (some 30,000 objects, none in a cycle) were otherwise
    scanned again and again, a third of the sink's time (BENCHMARKS.md)."""
    threshold = gc.get_threshold()
    gc.set_threshold(COLLECT_EVERY, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


class Decoder:
    """Reads ``start``'s partitions from their offsets, a batch at a time (module docstring)."""

    def __init__(self, config: SinkConfig, start: dict[tuple[str, int], int], stager: Stager):
        self._config = config
        self._stager = stager
        self._partitions = len(start)
        self._at_end: set[tuple[str, int]] = set()
        self._cdc_topics: set[str] = set()
        self.consumer = Consumer(consumer_settings(config))
        try:
            # The partitions' leaders first: assigned before librdkafka knows them, a
            # partition to be read from its beginning waited 0.5 s for its offset query.
            for topic in {topic for topic, _ in start}:
                self.consumer.list_topics(topic, timeout=config.timeout_s)
            self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
        except KafkaException as e:
            self.consumer.close()
            raise SinkError(f"no broker at {config.bootstrap}: {kafka_text(e)}") from None
        except BaseException:
            self.consumer.close()
            raise

    @property
    def at_end(self) -> bool:
        """Every partition has been read to its end (for read_committed, its last stable
        offset), as far as the last :meth:`read` knows."""
        return len(self._at_end) == self._partitions

    def read(self, wait_s: float = _WAIT_S) -> Batch | None:
        """The next batch, or None if no record came within ``wait_s``; a NotAChangelog for
        a batch holding a record that is not a change, a SinkError if the consumer failed."""
        messages = ready(self.consumer, self._config.max_batch, wait_s)
        last: dict[tuple[str, int], int] = {}  # per partition read, the last offset
        ends: dict[tuple[str, int], int] = {}  # per partition found at its end, that end
        stage, cdc_topics, errors = self._stager.stage, self._cdc_topics, 0
        for message in messages:  # per record: the sink's hottest loop
            error = message.error()
            if error is not None:
                errors += 1
                if error.code() == KafkaError._PARTITION_EOF:
                    where = _where(message)
                    ends[where[:2]] = where[2]
                elif error.fatal():
                    raise SinkError(f"the consumer failed: {error.str()}")
                continue  # transient (a broker restarting): librdkafka retries
            topic: str = message.topic()  # type: ignore[assignment]
            if topic in cdc_topics:
                change = change_of(topic, message.key(), message.value(), cdc=True)
            else:
                change = change_of(topic, message.key(), message.value(),
                                   cdc=_has_cdc_header(message))  # fmt: skip
                if change.cdc:
                    cdc_topics.add(topic)
            stage(change)
            last[(topic, message.partition())] = message.offset()  # type: ignore[index,assignment]
        self._at_end |= ends.keys()
        for read, offset in last.items():
            if offset >= ends.get(read, -1):  # a record after its end, or no end seen
                self._at_end.discard(read)
        if not last:
            return None
        positions = {read: offset + 1 for read, offset in last.items()}
        return Batch(self._stager.take(), len(messages) - errors, positions)

    def close(self) -> None:
        self.consumer.close()


def share(start: dict[tuple[str, int], int], count: int) -> list[dict[tuple[str, int], int]]:
    """``start``'s partitions dealt round robin into ``count`` shares (none empty)."""
    shares: list[dict[tuple[str, int], int]] = [{} for _ in range(min(count, len(start)))]
    for n, (partition, offset) in enumerate(sorted(start.items())):
        shares[n % len(shares)][partition] = offset
    return shares


class DecoderProcesses:
    """``count`` decoders in child processes (module docstring); use it as a context manager.
    They start at once (an interpreter and its imports, some 0.15 s, while the sink opens its
    store); :meth:`begin` gives each a share of the partitions, and :meth:`read` the
    batches they sent."""

    def __init__(self, count: int) -> None:
        self._children: list[_Child] = []
        try:
            for _ in range(count):
                self._children.append(_Child())
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> DecoderProcesses:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def begin(self, config: SinkConfig, start: dict[tuple[str, int], int], stager: Stager) -> None:
        """Read ``start``'s partitions from their offsets, a share per child (a child left
        without a partition stops)."""
        shares = share(start, len(self._children))
        for child in self._children[len(shares) :]:
            child.stop()
        self._children = self._children[: len(shares)]
        for child, part in zip(self._children, shares, strict=True):
            child.begin(config, part, stager)

    @property
    def at_end(self) -> bool:
        return all(child.at_end for child in self._children)

    def read(self) -> list[Batch]:
        """The batches the children sent, waiting up to 0.2 s for one. The batches of the
        call before are taken: a child reads one batch ahead of the sink, no more."""
        for child in self._children:
            child.taken()
        ready_children = wait([child.connection for child in self._children], _WAIT_S)
        batches = []
        for child in self._children:
            if child.connection in ready_children:
                batch = child.receive()
                if batch is not None:
                    batches.append(batch)
        return batches

    def stop(self) -> None:
        """Tell every child to stop (:meth:`close` sees them exit)."""
        for child in self._children:
            child.stop(wait=False)

    def close(self) -> None:
        self.stop()
        for child in self._children:
            child.stop()
        self._children = []


class _Child:
    def __init__(self) -> None:
        ours, theirs = Pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "riverbed.sinks.decoding", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.connection = ours
        self.at_end = False
        self._holding = False  # a batch received that the child is not told was taken

    def begin(self, config: SinkConfig, start: dict[tuple[str, int], int], stager: Stager) -> None:
        try:
            self.connection.send((config, start, stager))
        except OSError:
            raise SinkError(self.ended()) from None

    def receive(self) -> Batch | None:
        """The child's next message: a batch, or news of its partitions' end (None); its
        error raised as the sink's."""
        try:
            kind, *body = self.connection.recv()
        except (EOFError, OSError):
            raise SinkError(self.ended()) from None
        if kind == "error":
            error, text = body
            raise (NotAChangelog if error == "NotAChangelog" else SinkError)(text)
        if kind == "at-end":
            self.at_end = body[0]
            return None
        batch, self.at_end = body
        self._holding = True
        assert isinstance(batch, Batch)
        return batch

    def taken(self) -> None:
        if self._holding:
            self._holding = False
            with contextlib.suppress(OSError):  # it ended: its socket says so when read
                self.connection.send(_TAKEN)

    def ended(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return f"a decoder process ended (exit code {code}) before the sink stopped it"

    def stop(self, *, wait: bool = True) -> None:
        """Tell the child to stop, and with ``wait`` see it exit (killed after 10 s)."""
        if not self.connection.closed:
            with contextlib.suppress(OSError):
                self.connection.send(_STOP)
            self.connection.close()
        if not wait:
            return
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _child(connection: Connection) -> None:
    """A decoder process: reads its partitions and sends each batch (``("batch", Batch,
    at_end)``), news of their end when it has nothing to send (``("at-end", bool)``) or its
    error (``("error", class name, text)``). It is told ``taken`` (the sink holds its last
    batch no more: the next may go) and ``stop``; it reads one batch ahead of the sink."""
    config, start, stager = connection.recv()
    try:
        decoder = Decoder(config, start, stager)
    except SinkError as e:
        connection.send(("error", type(e).__name__, str(e)))
        return
    held = False  # the sink has a batch it has not taken
    ahead: tuple[Batch, bool] | None = None  # read, not sent
    said_at_end = False
    try:
        while True:
            while connection.poll(_WAIT_S if held and ahead is not None else 0):
                if connection.recv() == _STOP:
                    return
                held = False
            if ahead is not None and not held:
                connection.send(("batch", *ahead))
                ahead, held = None, True
            if ahead is not None:
                continue
            try:
                batch = decoder.read(_CHILD_WAIT_S)
            except SinkError as e:
                connection.send(("error", type(e).__name__, str(e)))
                return
            if batch is not None:
                ahead, said_at_end = (batch, decoder.at_end), decoder.at_end
            elif decoder.at_end != said_at_end:
                said_at_end = decoder.at_end
                connection.send(("at-end", said_at_end))
    finally:
        decoder.close()


def kafka_text(error: KafkaException) -> str:
    """librdkafka's words for ``error``."""
    first = error.args[0] if error.args else error
    return first.str() if isinstance(first, KafkaError) else str(first)


def _where(message: Message) -> tuple[str, int, int]:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None
    return topic, partition, offset


def _has_cdc_header(message: Message) -> bool:
    headers = message.headers()
    return headers is not None and any(header[0] == CDC_HEADER for header in headers)


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Log lines (librdkafka's) are dropped, as the sink's tools drop theirs: what stops a
    # decoder goes to the sink as its error.
    logging.getLogger().addHandler(logging.NullHandler())
    gone = contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError)  # the sink
    with Connection(int(argv[0])) as connection, gone, fewer_collections():
        _child(connection)


if __name__ == "__main__":  # run as __main__: the batches' classes must be this module's
    from riverbed.sinks.decoding import main as decoding_main

    decoding_main(sys.argv[1:])
