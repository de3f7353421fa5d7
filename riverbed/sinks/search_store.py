"""The search index: a Tantivy store (DESIGN.md, "Derived data").

One Tantivy document per row; its fields (the schema is fixed when the index is created, and
an index made with another schema is refused):

- ``doc_id`` (raw, indexed): the collection and the row id joined with a NUL, the term a
  row's upsert or delete replaces by (``delete_documents_by_term``);
- ``collection`` (raw, indexed, stored) and ``row_id`` (raw, indexed, stored): the table (or
  changelog topic) and the row's id (``riverbed.sinks.changes``);
- ``text`` (default tokenizer, indexed): every string value of the row (a string inside a
  JSON column too), one value each: the field a bare word searches;
- ``row`` (a JSON field, default tokenizer, indexed): the row, so ``title:shoes`` searches
  the column ``title`` (Tantivy reads a field name it does not know as a path in the default
  JSON field; ``row.title:shoes`` says the same where a column is called like a field above);
  numbers are indexed as numbers (``price:12``);
- ``row_json`` (bytes, stored): the row's JSON text, exactly as it came (Tantivy's stored
  JSON would turn a string that looks like a date into a date).

A query is Tantivy's query syntax (``red shoes``, ``+red -blue``, ``"red shoes"``,
``title:shoes AND category:sport``, ``collection:products``) with ``text`` and ``row`` as the
default fields; terms are OR-ed unless marked, hits come best first (BM25).

A change replaces the row's document (delete by ``doc_id``, then add); a delete or tombstone
deletes it, a truncate deletes every document of the collection. A column whose value did
not come with the change (an unchanged TOAST value, :attr:`Change.unavailable`) keeps the
value the row had: the last row of this batch, else the last commit's.

**The positions.** Tantivy's commit payload would be the place for them, but the Python
bindings (0.27) cannot set it; so they are one more document, ``doc_id`` = NUL +
``positions`` (no row id can be that: a collection is never empty), its ``row_json`` the
JSON list ``[[topic, partition, offset], ...]``. :meth:`SearchStore.commit` replaces it
and then commits once: the batch and the positions become visible in the same Tantivy
commit (the atomic rename of ``meta.json``), or neither does. A crash before it leaves the
last commit as it was; the files of the lost batch are garbage collected by the next writer.
Searches never see the positions document.

**Threads and processes.** A :class:`SearchStore` is used from one thread; Tantivy indexes
in threads of its own (one per core, up to 8) and merges segments in the background. One
writer per directory (Tantivy's ``.tantivy-writer.lock``: a second one gets a
:class:`SinkError`); :func:`search` and a ``read_only`` store take no writer lock, so they
run beside a sink and see its last commit.

Errors: :class:`SinkError` (a directory that cannot be created or written, that holds
something other than a riverbed search index, or that another writer holds; an index that
is not there), and its subclass :class:`SearchQueryError` for a query Tantivy cannot parse.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import tantivy

from riverbed.sinks.changes import Change, SinkError
from riverbed.sinks.store import Positions, TopicPartition

__all__ = ["DEFAULT_LIMIT", "WRITER_HEAP_BYTES", "Hit", "SearchQueryError", "SearchStore", "search"]

WRITER_HEAP_BYTES = 128_000_000
"""The writer's indexing memory, shared by its threads: tantivy-py's default."""

DEFAULT_LIMIT = 10
"""How many hits :func:`search` returns unless told: Tantivy's default ``limit``."""

_SEPARATOR = "\x00"
_POSITIONS_ID = _SEPARATOR + "positions"
_DEFAULT_FIELDS = ["text", "row"]


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("doc_id", tokenizer_name="raw", index_option="basic")
    builder.add_text_field("collection", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("row_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("text")
    builder.add_json_field("row")
    builder.add_bytes_field("row_json", stored=True)
    return builder.build()


_SCHEMA = _schema()


class SearchQueryError(SinkError):
    """A query Tantivy's parser refuses; the message is Tantivy's, on one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    """One row :func:`search` found (``orjson.dumps(hit)`` is its JSON line)."""

    collection: str
    id: str
    """The row id (``riverbed.sinks.changes``)."""
    score: float
    """Tantivy's BM25 score: higher is better."""
    row: dict[str, Any]
    """The row as it was stored."""


def search(directory: str | Path, query: str, *, limit: int = DEFAULT_LIMIT) -> list[Hit]:
    """The rows of the index at ``directory`` matching ``query`` (module docstring), best
    first, at most ``limit``. Reads the last commit; takes no lock."""
    if limit < 1:
        raise SinkError(f"a search limit must be at least 1, not {limit}")
    index = _open_index(Path(directory), create=False)
    try:
        parsed = index.parse_query(query, _DEFAULT_FIELDS)
    except ValueError as e:
        raise SearchQueryError(f"not a query: {query!r} ({_one_line(e)})") from None
    not_positions = tantivy.Query.term_query(_SCHEMA, "doc_id", _POSITIONS_ID)
    both = tantivy.Query.boolean_query(
        [(tantivy.Occur.Must, parsed), (tantivy.Occur.MustNot, not_positions)]
    )
    searcher = index.searcher()
    hits: list[Hit] = []
    for score, address in searcher.search(both, limit, count=False).hits:
        collection, row_id, row = _stored_row(searcher.doc(address))
        hits.append(Hit(collection=collection, id=row_id, score=float(score), row=row))
    return hits


class SearchStore:
    """See the module docstring. ``read_only``: open the last commit for :meth:`rows` and
    :meth:`positions` without the writer lock (``apply`` and ``commit`` refuse)."""

    def __init__(self, directory: str | Path, *, read_only: bool = False) -> None:
        self.name = str(directory)
        self._path = Path(directory)
        self._read_only = read_only
        self._index: tantivy.Index | None = None
        self._writer: tantivy.IndexWriter | None = None
        self._positions: dict[TopicPartition, int] = {}
        # This batch's rows (collection -> row id -> row, None: deleted) and truncated
        # collections, for the TOAST merges: the writer's documents cannot be read back
        # before the commit.
        self._batch: dict[str, dict[str, dict[str, Any] | None]] = {}
        self._truncated: set[str] = set()
        self._failed: str | None = None

    def open(self) -> None:
        index = _open_index(self._path, create=not self._read_only)
        if not self._read_only:
            try:
                self._writer = index.writer(heap_size=WRITER_HEAP_BYTES)
            except ValueError as e:
                if "LockBusy" in str(e):
                    raise SinkError(
                        f"the search index {self._path} is in use by another writer "
                        "(a sink running on it?)"
                    ) from None
                raise SinkError(
                    f"cannot write the search index {self._path}: {_one_line(e)}"
                ) from None
        self._index = index
        try:
            stored = self._stored(_POSITIONS_ID)
            self._positions = {(t, p): o for t, p, o in orjson.loads(stored)} if stored else {}
        except (ValueError, TypeError):
            self.close()
            raise SinkError(f"the search index {self._path} holds unreadable positions") from None

    def positions(self) -> dict[TopicPartition, int]:
        self._require()
        return dict(self._positions)

    def apply(self, changes: Sequence[Change]) -> None:
        writer = self._require_writer()
        # First every document, on an overlay of the batch's state (a row that cannot be
        # encoded stops the batch before the writer has any of it) ...
        rows: dict[str, dict[str, dict[str, Any] | None]] = {}
        truncated: set[str] = set()
        operations: list[tuple[str, str]] = []
        for change in changes:
            collection = change.collection
            if change.truncate:
                rows[collection] = {}
                truncated.add(collection)
                operations.append(("truncate", collection))
                continue
            doc_id = collection + _SEPARATOR + change.row_id
            row = change.row
            if row is not None and change.unavailable:
                before = self._row_before(collection, change.row_id, rows, truncated)
                if before is not None:
                    kept = {c: before[c] for c in change.unavailable if c in before}
                    row = {**row, **kept}
            rows.setdefault(collection, {})[change.row_id] = row
            operations.append(("delete", doc_id))
            if row is not None:
                operations.append(("add", _document(collection, change.row_id, doc_id, row)))
        # ... then the writer.
        try:
            for operation, argument in operations:
                if operation == "truncate":
                    writer.delete_documents_by_term("collection", argument)
                elif operation == "delete":
                    writer.delete_documents_by_term("doc_id", argument)
                else:
                    writer.add_json(argument)
        except (ValueError, RuntimeError) as e:
            self._fail(f"the search index {self._path} refused a change: {_one_line(e)}")
        for collection in truncated:
            self._batch[collection] = {}
            self._truncated.add(collection)
        for collection, batch_rows in rows.items():
            self._batch.setdefault(collection, {}).update(batch_rows)

    def commit(self, positions: Positions) -> None:
        writer = self._require_writer()
        merged = {**self._positions, **positions}
        listed = [[t, p, o] for (t, p), o in sorted(merged.items())]
        document = {
            "doc_id": _POSITIONS_ID,
            "row_json": base64.b64encode(orjson.dumps(listed)).decode(),
        }
        try:
            writer.delete_documents_by_term("doc_id", _POSITIONS_ID)
            writer.add_json(orjson.dumps(document).decode())
            writer.commit()
        except (ValueError, RuntimeError) as e:
            self._fail(f"cannot commit to the search index {self._path}: {_one_line(e)}")
        self._positions = merged
        self._batch.clear()
        self._truncated.clear()
        assert self._index is not None
        self._index.reload()

    def close(self) -> None:
        """Drop the uncommitted batch, wait for the merges, release the writer lock."""
        writer, self._writer, self._index = self._writer, None, None
        self._batch.clear()
        self._truncated.clear()
        self._failed = None
        if writer is not None:
            try:
                writer.rollback()
                writer.wait_merging_threads()  # consumes the writer: the lock is released
            except (ValueError, RuntimeError) as e:
                raise SinkError(f"closing the search index {self._path}: {_one_line(e)}") from None

    def rows(self, collection: str) -> dict[str, dict[str, Any]]:
        """Every row of ``collection`` in the last commit: row id -> the row."""
        index = self._require()
        searcher = index.searcher()
        if searcher.num_docs == 0:
            return {}
        query = tantivy.Query.term_query(_SCHEMA, "collection", collection)
        found: dict[str, dict[str, Any]] = {}
        for _, address in searcher.search(query, searcher.num_docs, count=False).hits:
            _, row_id, row = _stored_row(searcher.doc(address))
            found[row_id] = row
        return found

    def _row_before(
        self, collection: str, row_id: str,
        rows: dict[str, dict[str, dict[str, Any] | None]], truncated: set[str],
    ) -> dict[str, Any] | None:  # fmt: skip
        """The row as the changes before this one left it."""
        for batch_rows, emptied in ((rows, truncated), (self._batch, self._truncated)):
            collection_rows = batch_rows.get(collection, {})
            if row_id in collection_rows:
                return collection_rows[row_id]
            if collection in emptied:
                return None
        stored = self._stored(collection + _SEPARATOR + row_id)
        return None if stored is None else _loads_row(stored)

    def _stored(self, doc_id: str) -> bytes | None:
        """The ``row_json`` of a document in the last commit."""
        searcher = self._require().searcher()
        query = tantivy.Query.term_query(_SCHEMA, "doc_id", doc_id)
        for _, address in searcher.search(query, 1, count=False).hits:
            stored: bytes = searcher.doc(address)["row_json"][0]
            return stored
        return None

    def _fail(self, message: str) -> None:
        """The writer holds part of a batch: drop the whole uncommitted batch, and refuse to
        commit until the store is closed (its positions would claim the dropped changes)."""
        self._failed = message
        if self._writer is not None:
            # If the writer is unusable, _failed keeps commit from going on all the same.
            with contextlib.suppress(ValueError, RuntimeError):
                self._writer.rollback()
        raise SinkError(message)

    def _require(self) -> tantivy.Index:
        if self._index is None:
            raise SinkError(f"the search index {self._path} is not open")
        return self._index

    def _require_writer(self) -> tantivy.IndexWriter:
        self._require()
        if self._failed is not None:
            raise SinkError(self._failed)
        if self._writer is None:
            raise SinkError(f"the search index {self._path} is open read-only")
        return self._writer


def _document(collection: str, row_id: str, doc_id: str, row: dict[str, Any]) -> str:
    try:
        row_json = orjson.dumps(row)
    except orjson.JSONEncodeError as e:
        raise SinkError(f"{collection} row {row_id}: not JSON ({e})") from None
    document = {
        "doc_id": doc_id, "collection": collection, "row_id": row_id,
        "text": list(_strings(row)), "row": row,
        "row_json": base64.b64encode(row_json).decode(),
    }  # fmt: skip
    return orjson.dumps(document).decode()


def _strings(value: Any) -> Iterator[str]:
    """Every string in a row, in its columns' order (a JSON column's strings too)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _loads_row(stored: bytes) -> dict[str, Any]:
    row: dict[str, Any] = orjson.loads(stored)
    return row


def _stored_row(document: tantivy.Document) -> tuple[str, str, dict[str, Any]]:
    """A row's document as (collection, row id, row)."""
    return document["collection"][0], document["row_id"][0], _loads_row(document["row_json"][0])


def _open_index(path: Path, *, create: bool) -> tantivy.Index:
    """The riverbed search index at ``path``; ``create``: make it where there is none."""
    if path.exists() and not path.is_dir():
        raise SinkError(f"no search index at {path}: it is not a directory")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SinkError(
                f"cannot create the search index directory {path}: {e.strerror}"
            ) from None
    elif not path.is_dir():
        raise SinkError(f"no search index at {path}: it does not exist")
    try:
        exists = (path / "meta.json").exists()
        if not exists and (not create or any(path.iterdir())):
            raise SinkError(f"no search index at {path}: it holds no Tantivy index")
        index = tantivy.Index(_SCHEMA, path=str(path), reuse=True)
    except OSError as e:
        raise SinkError(f"cannot read the search index {path}: {e}") from None
    except ValueError as e:
        if "schema does not match" in str(e):
            raise SinkError(
                f"{path} holds a Tantivy index that is not a riverbed search index"
            ) from None
        raise SinkError(f"the search index {path}: {_one_line(e)}") from None
    index.config_reader(reload_policy="manual")  # reloaded after each commit, no file watcher
    return index


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
