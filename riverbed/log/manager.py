"""All the logs of one broker: topics, their partitions, and producer-id allocation.

On disk, in DATA_DIR:

- ``topics.json``: ``{"version": 0, "topics": [{"name", "topic_id" (uuid hex), "partitions",
  "configs" (the topic's overrides)}]}``, replaced atomically (tmp + fsync + rename + dir
  fsync) on every change;
- ``TOPIC-PARTITION/``: one :class:`~riverbed.log.log.Log` per partition, plus Kafka's
  ``partition.metadata`` (``version: 0`` / ``topic_id: <base64url uuid>``);
- ``producer-id-block``: the first producer id *not* yet reserved; ids are handed out from
  a block of :data:`PRODUCER_ID_BLOCK_SIZE` reserved on disk first, so no id is reused after
  a restart (unused ids of a reserved block are skipped, as with Kafka's ProducerIdManager).

After a crash: topics.json is either the old or the new version (rename is atomic). A
partition directory without a topic entry (created before a crash) is ignored; a topic
entry whose directory is missing gets an empty log. Directories renamed for deletion
(``TOPIC-P.<uuid>-delete``, as Kafka names them) are removed on open.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from riverbed.log.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from riverbed.log.index import fsync_path, write_atomically
from riverbed.log.log import Log
from riverbed.log.topic_config import TopicConfig

TOPICS_FILE = "topics.json"
PRODUCER_ID_FILE = "producer-id-block"
PARTITION_METADATA_FILE = "partition.metadata"
PRODUCER_ID_BLOCK_SIZE = 1000
"""Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE."""
MAX_TOPIC_NAME_LENGTH = 249
"""Kafka's Topic.MAX_NAME_LENGTH."""
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_DELETE_SUFFIX = "-delete"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    """The topic's overrides only (effective values: LogManager.topic_config)."""


def validate_topic_name(name: str) -> None:
    """InvalidTopicError unless ``name`` follows Kafka's Topic.validate rules."""
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"illegal topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


class LogManager:
    """The topics and partition logs under one data directory (format in the module doc).

    Not thread-safe except :meth:`flush_all` (each Log's flush is)."""

    def __init__(self, data_dir: Path, *, defaults: TopicConfig, clock: Callable[[], int]) -> None:
        self.data_dir = data_dir
        self.defaults = defaults
        self._clock = clock
        self._topics: dict[str, TopicMetadata] = {}
        self._logs: dict[tuple[str, int], Log] = {}
        self._next_producer_id = 0
        self._reserved_until = 0

    @classmethod
    def open(cls, data_dir: Path, *, defaults: TopicConfig, clock: Callable[[], int]) -> LogManager:
        data_dir.mkdir(parents=True, exist_ok=True)
        manager = cls(data_dir, defaults=defaults, clock=clock)
        for path in data_dir.iterdir():
            if path.is_dir() and path.name.endswith(_DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
        topics_path = data_dir / TOPICS_FILE
        if topics_path.exists():
            for metadata in _read_topics(topics_path):
                manager._topics[metadata.name] = metadata
                for partition in range(metadata.partitions):
                    manager._open_log(metadata, partition)
        id_path = data_dir / PRODUCER_ID_FILE
        if id_path.exists():
            try:
                manager._next_producer_id = int(id_path.read_text().strip())
            except (OSError, ValueError, UnicodeDecodeError) as e:
                raise StorageError(f"{id_path} is damaged ({e}); refusing to reuse ids") from None
            manager._reserved_until = manager._next_producer_id
        return manager

    # --- topics ---------------------------------------------------------------------------

    def topics(self) -> Mapping[str, TopicMetadata]:
        return MappingProxyType(self._topics)

    def topic_config(self, name: str) -> TopicConfig:
        """The effective config of a topic (broker defaults + its overrides)."""
        metadata = self._topic(name)
        return TopicConfig.from_properties(metadata.configs, base=self.defaults)

    def create_topic(
        self, name: str, *, partitions: int, configs: Mapping[str, str] = MappingProxyType({})
    ) -> TopicMetadata:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        collides = [t for t in self._topics if t.replace(".", "_") == name.replace(".", "_")]
        if collides:
            raise InvalidTopicError(f"topic {name!r} collides with {collides[0]!r} ('.' vs '_')")
        if partitions < 1:
            raise InvalidPartitionsError(f"partitions must be at least 1, not {partitions}")
        TopicConfig.from_properties(configs, base=self.defaults)  # InvalidConfigError
        metadata = TopicMetadata(
            name=name,
            topic_id=uuid.uuid4(),
            partitions=partitions,
            configs=MappingProxyType(dict(configs)),
        )
        self._topics[name] = metadata
        self._write_topics()
        for partition in range(partitions):
            self._open_log(metadata, partition)
        return metadata

    def create_partitions(self, name: str, *, total: int) -> TopicMetadata:
        metadata = self._topic(name)
        if total <= metadata.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {metadata.partitions} partitions; {total} does not grow it"
            )
        grown = TopicMetadata(
            name=name, topic_id=metadata.topic_id, partitions=total, configs=metadata.configs
        )
        self._topics[name] = grown
        self._write_topics()
        for partition in range(metadata.partitions, total):
            self._open_log(grown, partition)
        return grown

    def delete_topic(self, name: str) -> None:
        """Rename each partition directory to ``TOPIC-P.<uuid>-delete``, forget the topic
        (durably), then remove the directories."""
        metadata = self._topic(name)
        doomed = []
        for partition in range(metadata.partitions):
            log = self._logs.pop((name, partition))
            log.delete_files_later()
            target = self.data_dir / f"{name}-{partition}.{uuid.uuid4().hex}{_DELETE_SUFFIX}"
            log.directory.rename(target)
            doomed.append(target)
        del self._topics[name]
        self._write_topics()
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata:
        """Replace a topic's overrides; the partitions' logs take the new config at once."""
        metadata = self._topic(name)
        effective = TopicConfig.from_properties(configs, base=self.defaults)
        altered = TopicMetadata(
            name=name,
            topic_id=metadata.topic_id,
            partitions=metadata.partitions,
            configs=MappingProxyType(dict(configs)),
        )
        self._topics[name] = altered
        self._write_topics()
        for partition in range(altered.partitions):
            self._logs[(name, partition)].config = effective
        return altered

    def partition_logs(self) -> list[tuple[tuple[str, int], Log]]:
        """Every partition's log, by (topic, partition) (a copy: safe to change topics
        while iterating)."""
        return list(self._logs.items())

    def log(self, topic: str, partition: int) -> Log:
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}") from None

    def _topic(self, name: str) -> TopicMetadata:
        try:
            return self._topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}") from None

    def _open_log(self, metadata: TopicMetadata, partition: int) -> None:
        directory = self.data_dir / f"{metadata.name}-{partition}"
        fresh = not directory.exists()
        config = TopicConfig.from_properties(metadata.configs, base=self.defaults)
        log = Log.open(directory, config=config, clock=self._clock)
        metadata_path = directory / PARTITION_METADATA_FILE
        if fresh or not metadata_path.exists():
            encoded = base64.urlsafe_b64encode(metadata.topic_id.bytes).rstrip(b"=").decode()
            write_atomically(metadata_path, f"version: 0\ntopic_id: {encoded}\n".encode())
            fsync_path(self.data_dir)
        self._logs[(metadata.name, partition)] = log

    def _write_topics(self) -> None:
        document = {
            "version": 0,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id.hex,
                    "partitions": t.partitions,
                    "configs": dict(t.configs),
                }
                for t in self._topics.values()
            ],
        }
        write_atomically(self.data_dir / TOPICS_FILE, json.dumps(document, indent=1).encode())

    # --- producer ids ---------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts."""
        if self._next_producer_id >= self._reserved_until:
            self._reserved_until = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
            write_atomically(self.data_dir / PRODUCER_ID_FILE, f"{self._reserved_until}\n".encode())
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    # --- lifecycle ------------------------------------------------------------------------

    def flush_all(self) -> None:
        for log in list(self._logs.values()):
            log.flush()

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()


def _read_topics(path: Path) -> list[TopicMetadata]:
    """The topics recorded in ``topics.json``.

    The file is only ever replaced atomically, so damage means something outside riverbed
    changed it: raise :class:`StorageError` naming the file rather than guess (a guess could
    drop a topic's configs or its data).
    """
    try:
        document = json.loads(path.read_text())
        return [
            TopicMetadata(
                name=entry["name"],
                topic_id=uuid.UUID(hex=entry["topic_id"]),
                partitions=int(entry["partitions"]),
                configs=MappingProxyType({str(k): str(v) for k, v in entry["configs"].items()}),
            )
            for entry in document["topics"]
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise StorageError(f"{path} is damaged: {e}; restore it or move it away") from None
