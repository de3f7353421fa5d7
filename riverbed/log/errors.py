"""The one exception hierarchy of :mod:`riverbed.log`.

Every error the storage engine raises on purpose is a :class:`LogError`. The subclasses are
named after the Kafka error the broker is expected to map them to (``CorruptRecordError`` ->
``CORRUPT_MESSAGE``, ``OffsetOutOfRangeError`` -> ``OFFSET_OUT_OF_RANGE``, ...); the mapping to
wire error codes lives in the broker, never here.

Whose fault it is:

- the *producer's* (bad input; nothing was written): :class:`CorruptRecordError`,
  :class:`InvalidRecordError`, :class:`RecordTooLargeError`, :class:`OutOfOrderSequenceError`,
  :class:`InvalidProducerEpochError`, :class:`InvalidTxnStateError`;
- the *caller's* (a request that names something wrong): :class:`OffsetOutOfRangeError`,
  :class:`UnknownTopicOrPartitionError`, :class:`TopicExistsError`, :class:`InvalidTopicError`,
  :class:`InvalidPartitionsError`, :class:`InvalidConfigError`;
- the *machine's* (an I/O failure such as a full disk): :class:`StorageError`. A failed append
  is rolled back (the file is truncated to where it was), so the log stays valid.
"""

from __future__ import annotations


class LogError(Exception):
    """Base class of every error raised by riverbed.log."""


class CorruptRecordError(LogError):
    """A produced batch has a bad magic, CRC-32C, length or header field."""


class InvalidRecordError(LogError):
    """A well-formed batch that a client may not produce (a control batch): INVALID_RECORD."""


class RecordTooLargeError(LogError):
    """A batch is larger than the topic's ``max.message.bytes``."""


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset below log_start_offset or above log_end_offset."""


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch does not continue its sequence numbers."""


class InvalidProducerEpochError(LogError):
    """An idempotent producer used an epoch older than the current one: it is fenced."""


class InvalidTxnStateError(LogError):
    """A producer with an ongoing transaction sent a non-transactional batch (Kafka's
    ProducerAppendInfo raises INVALID_TXN_STATE for it)."""


class UnknownTopicOrPartitionError(LogError):
    """No such topic, or no such partition of it."""


class TopicExistsError(LogError):
    """create_topic of a name that already exists."""


class InvalidTopicError(LogError):
    """A topic name breaks Kafka's rules ([a-zA-Z0-9._-], 1..249 chars, not "." or "..")."""


class InvalidPartitionsError(LogError):
    """A partition count that is not positive, or does not grow the topic."""


class InvalidConfigError(LogError):
    """An unknown topic config name or a value it does not accept."""


class StorageError(LogError):
    """The disk failed us (ENOSPC, EIO, ...); Kafka's KAFKA_STORAGE_ERROR."""
