"""riverbed's storage engine: topics, partitions, segments, indexes, recovery, retention,
compaction and producer state, in Kafka's on-disk layout. No network, no protocol types.

On disk, under one data directory (:class:`LogManager`)::

    topics.json, producer-id-block           the topics and the producer-id block
    TOPIC-PARTITION/                         one partition's log (:class:`Log`)
        <20-digit base offset>.log           record batches (magic v2) as produced,
            .index .timeindex .txnindex      offsets patched in; and their indexes
        <offset>.snapshot                    producer state
        recovery-point, log-start-offset, clean-shutdown

Crash guarantees: :meth:`Log.append` writes without fsync (a batch survives a crash of the
process); :meth:`Log.flush` fsyncs (everything below :attr:`Log.flushed_offset` survives a
crash of the machine). Opening a log after a crash scans its tail from the recovery point,
cuts it at the first torn or corrupt batch, rebuilds indexes (never trusted unless fsynced)
and replays producer state: no corrupt batch is served, no flushed batch is lost. Small state
files (``topics.json``, ``recovery-point``, ``log-start-offset``, the cleaner's swap
manifest) are replaced by tmp + fsync + rename, so a crash leaves the old one or the new one;
a DeleteRecords, retention pass or segment swap that a crash interrupts is finished (or, for
an uncommitted swap, discarded) at the next open.

Threads: everything runs on the caller's thread (the broker's event loop), except
:meth:`Log.flush` and :meth:`LogManager.flush_all`, which may run in a worker thread, and
the rewriting step of a cleaning (:func:`clean`), which takes and returns plain values and
may run in another process.

Errors: every error raised on purpose is a :class:`LogError`; :mod:`riverbed.log.errors`
describes the hierarchy and whose fault each error is.

The modules, from the bottom up: ``batch`` (v2 batch headers) and ``record_codec`` (the
records in a batch; ``compression``); ``index``, ``txn_index``, ``segment`` (one segment's
files); ``producer_state``; ``loader`` (opening and recovery); ``log`` (one partition);
``retention`` and ``deleted_files`` (removing old data); ``cleaner``, ``compaction``,
``swap`` and ``cleaner_process`` (compaction); ``topic_config``; ``manager`` (all topics);
``file_records`` (zero-copy reads).
"""

from riverbed.log.batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    BatchHeader,
    TimestampType,
    iter_batches,
    parse_header,
)
from riverbed.log.cleaner import (
    CleanerSettings,
    CleaningJob,
    CleaningResult,
    install,
    plan_cleaning,
)
from riverbed.log.compaction import clean
from riverbed.log.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTopicError,
    InvalidTxnStateError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from riverbed.log.file_records import FileRecords
from riverbed.log.log import AppendResult, Log
from riverbed.log.manager import LogManager, TopicMetadata
from riverbed.log.record_codec import (
    ABORT,
    COMMIT,
    Record,
    SimpleRecord,
    build_batch,
    control_type,
    decode_records,
)
from riverbed.log.retention import delete_old_segments, delete_records
from riverbed.log.topic_config import TOPIC_CONFIGS, TopicConfig
from riverbed.log.txn_index import AbortedTxn

__all__ = [
    "ABORT",
    "COMMIT",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TOPIC_CONFIGS",
    "AbortedTxn",
    "AppendResult",
    "BatchHeader",
    "CleanerSettings",
    "CleaningJob",
    "CleaningResult",
    "CorruptRecordError",
    "FileRecords",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "Log",
    "LogError",
    "LogManager",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "Record",
    "RecordTooLargeError",
    "SimpleRecord",
    "StorageError",
    "TimestampType",
    "TopicConfig",
    "TopicExistsError",
    "TopicMetadata",
    "UnknownTopicOrPartitionError",
    "build_batch",
    "clean",
    "control_type",
    "decode_records",
    "delete_old_segments",
    "delete_records",
    "install",
    "iter_batches",
    "parse_header",
    "plan_cleaning",
]
