"""FileRecords: whole batches of a log as regions of its segment files (Kafka's FileRecords).

A fetch does not need the batches in memory: it needs to know how many bytes there are and
where they lie, so the server can hand them to the kernel (``sendfile``) without copying
them through Python. Each region holds its own duplicate of the segment's file descriptor,
so its bytes stay readable even if the segment is closed or deleted before they are sent
(Kafka's FileRecords keeps the FileChannel open for the same reason). :meth:`close` releases
the descriptors; garbage collection does too, as a backstop.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FileRecords", "FileRegion"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRegion:
    """Bytes ``[position, position + size)`` of an open segment file."""

    file: io.FileIO
    position: int
    size: int


class FileRecords:
    """Concatenated regions of segment files holding whole batches; ``len()`` is their size."""

    __slots__ = ("_size", "regions")

    def __init__(self, regions: Sequence[FileRegion] = ()) -> None:
        self.regions = tuple(regions)
        self._size = sum(region.size for region in self.regions)

    @classmethod
    def of(cls, parts: Sequence[tuple[int, int, int]]) -> FileRecords:
        """Regions of ``(fd, position, size)``; each fd is duplicated, the original kept."""
        return cls(
            [
                FileRegion(file=io.FileIO(os.dup(fd), "rb", closefd=True), position=p, size=s)
                for fd, p, s in parts
                if s
            ]
        )

    def __len__(self) -> int:
        return self._size

    def read(self) -> bytes:
        """The bytes themselves (for callers that need them in memory)."""
        chunks = [os.pread(r.file.fileno(), r.size, r.position) for r in self.regions]
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def close(self) -> None:
        for region in self.regions:
            region.file.close()

    def __enter__(self) -> FileRecords:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
