"""Reading with the ``riverbed`` source: :class:`BatchReader` and :class:`StreamReader`.

They behave like Spark's Kafka source (``KafkaRelation`` and ``KafkaMicroBatchStream``); the
options are described in :mod:`riverbed.spark.source.options`, the offsets in
:mod:`riverbed.spark.source.offsets`. Errors (:mod:`riverbed.spark.errors`): a bad option
raises ``SourceOptionError`` when the query is defined or started; lost data raises
``DataLossError`` unless ``failOnDataLoss=false``.

Where things run:

- Spark creates a reader on the driver (in a Python worker) for every plan; its constructor
  only checks the options. The driver's calls (``partitions`` of a batch read; the stream's
  ``initialOffset``, ``latestOffset``, ``partitions``, ...) talk to the broker through one
  lazily created :class:`~riverbed.spark.source.kafka_client.OffsetClient`.
- A stream's reader object lives on the driver as long as the query runs, so it keeps the
  client, the ``Trigger.AvailableNow`` target and the ``minOffsetsPerTrigger`` clock; Spark
  polls ``latestOffset`` about every 10 ms when idle, and one call costs one ListOffsets
  request (plus a Metadata request at most once a second).
- ``read(partition)`` runs on executors, in a reader Spark pickled at planning time (without
  the client): everything a task needs is in its :class:`OffsetRangePartition`.

Partitions that appear while a stream runs (the topic grew, a new topic matches the pattern)
are read from offset 0; if they no longer start at 0 that is data loss, as in Spark.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from riverbed.spark.errors import DataLossError, SourceError
from riverbed.spark.source.admission import TriggerDelay, backlog, rate_limit
from riverbed.spark.source.kafka_client import OffsetClient, consumer_config
from riverbed.spark.source.offsets import (
    OffsetMap,
    OffsetRange,
    offsets_from_json,
    offsets_to_json,
    pack_ranges,
    split_ranges,
)
from riverbed.spark.source.options import SourceOptions, parse_source_options
from riverbed.spark.source.range_reader import ReadConfig, read_range
from riverbed.spark.worker_gc import freeze_survivors

__all__ = ["BatchReader", "OffsetRangePartition", "StreamReader"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetRangePartition(InputPartition):
    """One Spark task: offset ranges, read one after the other (one unless the micro-batch
    is small: :func:`~riverbed.spark.source.offsets.pack_ranges`), and how to read them
    (pickled)."""

    ranges: tuple[OffsetRange, ...]
    config: ReadConfig


def _read_config(options: SourceOptions) -> ReadConfig:
    return ReadConfig(
        consumer_config=consumer_config(options.client_config),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


def _input_partitions(
    ranges: list[OffsetRange], options: SourceOptions
) -> list[OffsetRangePartition]:
    config = _read_config(options)
    split = split_ranges(
        ranges,
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
    )
    if options.min_partitions is None and options.max_records_per_partition is None:
        return [OffsetRangePartition(task, config) for task in pack_ranges(split)]
    return [OffsetRangePartition((r,), config) for r in split]  # as many tasks as asked for


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    freeze_survivors()
    if isinstance(partition, OffsetRangePartition):
        config = partition.config
        return itertools.chain.from_iterable(read_range(r, config) for r in partition.ranges)
    if type(partition) is InputPartition and partition.value is None:
        return iter(())  # Spark's stand-in when partitions() returned none
    raise TypeError(f"not a riverbed input partition: {partition!r}")


class _ClientOwner:
    """A lazily created driver client that is left out when Spark pickles the reader."""

    _options: SourceOptions
    _client: OffsetClient | None

    def _offset_client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(self._options)
        return self._client

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.__dict__.update(state)


class BatchReader(_ClientOwner, DataSourceReader):
    """``spark.read.format("riverbed")``: the records between ``startingOffsets`` (default
    earliest) and ``endingOffsets`` (default latest), resolved once when Spark plans."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._options = parse_source_options(options, streaming=False)
        self._client = None

    def partitions(self) -> Sequence[InputPartition]:
        """Called once on the driver when Spark plans the read."""
        client = self._offset_client()
        try:
            partitions = client.partitions(refresh=True)
            start = client.resolve(self._options.starting, partitions, starting=True)
            end = client.resolve(self._options.ending, partitions, starting=False)
        finally:
            self._close_client()
        ranges: list[OffsetRange] = []
        for topic, partition in partitions:
            begin, until = start[(topic, partition)], end[(topic, partition)]
            if until < begin:
                raise SourceError(
                    f"topic {topic!r} partition {partition}: the starting offset {begin} is"
                    f" after the ending offset {until}; either the options are wrong or the"
                    " topic changed"
                )
            ranges.append(OffsetRange(topic=topic, partition=partition, start=begin, end=until))
        return _input_partitions(ranges, self._options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Once per partition, on an executor."""
        return _read(partition)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class StreamReader(_ClientOwner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("riverbed")``: micro-batches of offset ranges."""

    def __init__(
        self,
        options: Mapping[str, str],
        schema: StructType,
        *,
        clock_ms: Callable[[], float] = _monotonic_ms,
    ) -> None:
        self._options = parse_source_options(options, streaming=True)
        self._client = None
        self._clock_ms = clock_ms
        self._available_now_end: OffsetMap | None = None
        self._latest: OffsetMap | None = None
        minimum = self._options.min_offsets_per_trigger
        self._delay = (
            None
            if minimum is None
            else TriggerDelay(min_offsets=minimum, max_delay_ms=self._options.max_trigger_delay_ms)
        )

    def initialOffset(self) -> dict[str, Any]:
        """Once, for a query without a checkpoint: ``startingOffsets`` (or timestamps)."""
        client = self._offset_client()
        partitions = client.partitions(refresh=True)
        return offsets_to_json(client.resolve(self._options.starting, partitions, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        if self._options.min_offsets_per_trigger is not None:
            return ReadMinRows(self._options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """At the start of an ``availableNow`` run: the end offsets now are the run's target;
        partitions that appear later are not read in this run."""
        self._available_now_end = self._offset_client().latest_of_subscription()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch; ``start`` itself when there is nothing to read."""
        begin = offsets_from_json(start)
        latest = self._latest_offsets(begin)
        self._latest = latest
        end = latest
        if not isinstance(limit, ReadAllAvailable):
            if (
                self._delay is not None
                and self._available_now_end is None
                and self._delay.hold_back(backlog(begin, latest), now_ms=self._clock_ms())
            ):
                return start
            if isinstance(limit, ReadMaxRows):
                end = rate_limit(limit.max_rows, begin, latest)
        return start if end == begin else offsets_to_json(end)

    def _latest_offsets(self, begin: OffsetMap) -> OffsetMap:
        if self._available_now_end is not None:
            # Partitions added since the target was taken stay where they are: the run ends.
            return {**begin, **self._available_now_end}
        client = self._offset_client()
        latest = client.latest_of_subscription()
        if begin.keys() - latest.keys():
            # A partition is gone, or the cached metadata is behind: look again before a
            # batch reports data loss.
            latest = client.latest(client.partitions(refresh=True))
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """For progress reports only: the end offsets seen by the last ``latestOffset``."""
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks of one micro-batch (again with the same offsets after a restart)."""
        if start == end:
            return []
        begin, until = offsets_from_json(start), offsets_from_json(end)
        for topic, partition in sorted(begin.keys() - until.keys()):
            self._data_loss(
                f"Topic {topic!r} partition {partition} is gone (deleted?); offsets from"
                f" {begin[(topic, partition)]} on were not read."
            )
        ranges: list[OffsetRange] = []
        for (topic, partition), until_offset in sorted(until.items()):
            begin_offset = begin.get((topic, partition), 0)
            if until_offset < begin_offset:
                self._data_loss(
                    f"The end offset of topic {topic!r} partition {partition} went back from"
                    f" {begin_offset} to {until_offset} (was the topic deleted and created again?)."
                )
                continue
            ranges.append(
                OffsetRange(topic=topic, partition=partition, start=begin_offset, end=until_offset)
            )
        return _input_partitions(ranges, self._options)

    def _data_loss(self, message: str) -> None:
        if self._options.fail_on_data_loss:
            raise DataLossError(message)
        log.warning("%s Skipped (failOnDataLoss=false).", message)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Once per task, on an executor."""
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the checkpoint is the only record of progress (Spark's Kafka source
        commits nothing either)."""

    def stop(self) -> None:
        self._close_client()
