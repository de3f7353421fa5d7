"""The one place that maps failures to Kafka error codes.

Lower layers raise their own exceptions (``riverbed.log.errors``); handlers turn each into
the error code a Kafka client expects with :func:`error_code_for`, so no handler invents its
own mapping and no exception reaches a client as a closed connection. A handler that refuses
a request (or one item of it) for a rule of its own raises :class:`RequestRefused`, which
carries its code.
"""

from __future__ import annotations

from riverbed.log import errors as log_errors
from riverbed.protocol import ErrorCode

__all__ = ["RequestRefused", "error_code_for"]


class RequestRefused(Exception):
    """A request, or one item of it, that a handler refuses: ``code`` is what the client
    gets, the message its ``error_message``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


_BY_TYPE: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (log_errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (log_errors.CorruptRecordError, ErrorCode.corrupt_message),
    (log_errors.InvalidRecordError, ErrorCode.invalid_record),
    (log_errors.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (log_errors.RecordTooLargeError, ErrorCode.message_too_large),
    (log_errors.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (log_errors.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (log_errors.UnknownTopicOrPartitionError, ErrorCode.unknown_topic_or_partition),
    (log_errors.TopicExistsError, ErrorCode.topic_already_exists),
    (log_errors.InvalidTopicError, ErrorCode.invalid_topic_exception),
    (log_errors.InvalidPartitionsError, ErrorCode.invalid_partitions),
    (log_errors.InvalidConfigError, ErrorCode.invalid_config),
    (log_errors.StorageError, ErrorCode.kafka_storage_error),
    # The disk failed under us: Kafka's KAFKA_STORAGE_ERROR, retriable by clients.
    (OSError, ErrorCode.kafka_storage_error),
)


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised while serving a request."""
    if isinstance(exc, RequestRefused):
        return exc.code
    for exc_type, code in _BY_TYPE:
        if isinstance(exc, exc_type):
            return code
    return ErrorCode.unknown_server_error
