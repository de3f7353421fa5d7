"""Replacing segments by a cleaned one, crash-safely (Kafka's ``.cleaned`` → ``.swap`` → live).

The cleaner (:mod:`riverbed.log.cleaner`) merges a run of consecutive segments into one new
segment whose base offset is the first one's. Files, in the partition directory:

1. ``<base>.log.cleaned``, ``.index.cleaned``, ``.timeindex.cleaned`` and, if any aborted
   transaction is retained, ``.txnindex.cleaned``: the new segment, written and fsynced
   (with the directory) by the cleaner. A crash now leaves the old segments untouched; the
   ``.cleaned`` files are deleted at the next open.
2. ``cleaner-swap``, written atomically (tmp + fsync + rename): ``{"version": 0, "base": B,
   "replaces": [B, ...], "txn_index": bool}``. Its rename is the commit point.
3. :func:`complete_swap`: the files of every replaced segment but the first are renamed to
   ``*.deleted`` (removed later, :mod:`riverbed.log.deleted_files`); each ``<B>.*.cleaned``
   replaces ``<B>.*`` (``os.replace``; the old txn index is removed when the new segment has
   none); the directory is fsynced; ``cleaner-swap`` is removed.

After a crash with ``cleaner-swap`` present, step 3 is simply repeated at open: each part is
idempotent (a file already renamed or replaced is no longer there to rename, and the
manifest says whether a txn index belongs to the new segment, so a repeated step never
removes the new one). A kill -9 at any point thus leaves either the old segments or the
cleaned one, never a mixture, never both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from riverbed.log.deleted_files import rename_to_deleted
from riverbed.log.errors import StorageError
from riverbed.log.index import fsync_path, write_atomically

SWAP_FILE = "cleaner-swap"
CLEANED_SUFFIX = ".cleaned"
_EXTENSIONS = (".index", ".timeindex", ".txnindex", ".log")  # .log last: nothing depends on it


def _stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def cleaned_path(directory: Path, base_offset: int, extension: str) -> Path:
    """Where step 1 writes the new segment's file with ``extension`` (".log", ...)."""
    return directory / (_stem(base_offset) + extension + CLEANED_SUFFIX)


def commit_swap(
    directory: Path, *, base_offset: int, replaces: Sequence[int], txn_index: bool
) -> None:
    """Step 2: make the swap durable; from here on it completes even after a crash."""
    if not replaces or replaces[0] != base_offset:
        raise ValueError("the cleaned segment takes the base offset of the first it replaces")
    document = {
        "version": 0,
        "base": base_offset,
        "replaces": list(replaces),
        "txn_index": txn_index,
    }
    write_atomically(directory / SWAP_FILE, json.dumps(document).encode())


def complete_swap(directory: Path) -> list[Path]:
    """Step 3, if a swap is committed in ``directory``; the ``*.deleted`` files it made
    (for the caller to remove after the delay). Does nothing without ``cleaner-swap``."""
    manifest = directory / SWAP_FILE
    try:
        document = json.loads(manifest.read_bytes())
        base = int(document["base"])
        replaces = [int(b) for b in document["replaces"]]
        txn_index = bool(document["txn_index"])
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # Written by rename after an fsync: damage is not a torn write but outside meddling.
        raise StorageError(f"{manifest} is damaged ({exc}); cannot finish a cleaning") from None
    deleted = rename_to_deleted(
        directory / (_stem(old) + extension) for old in replaces[1:] for extension in _EXTENSIONS
    )
    for extension in _EXTENSIONS:
        source = cleaned_path(directory, base, extension)
        live = directory / (_stem(base) + extension)
        try:
            os.replace(source, live)
        except FileNotFoundError:
            if extension == ".txnindex" and not txn_index:
                live.unlink(missing_ok=True)
    fsync_path(directory)
    manifest.unlink()
    fsync_path(directory)
    return deleted


def discard_cleaned(directory: Path, base_offset: int) -> None:
    """Remove the ``.cleaned`` files of an uncommitted cleaning (the log changed meanwhile)."""
    for extension in _EXTENSIONS:
        cleaned_path(directory, base_offset, extension).unlink(missing_ok=True)
