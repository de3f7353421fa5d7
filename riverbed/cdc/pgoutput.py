"""A decoder of PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

Sans-IO: :func:`decode_message` turns the bytes of one message (the payload of one
XLogData of the streaming replication protocol, or one row of
``pg_logical_slot_get_binary_changes(..., 'proto_version', '1', 'publication_names', ...)``)
into one typed value, or raises :class:`~riverbed.cdc.errors.PgOutputError`; nothing else.

The formats are PostgreSQL's "Logical Replication Message Formats" (all integers
big-endian, strings NUL-terminated, times in microseconds since 2000-01-01 UTC, LSNs as
uint64)::

    Begin     'B' final_lsn:int64 commit_time:int64 xid:int32
    Commit    'C' flags:int8 commit_lsn:int64 end_lsn:int64 commit_time:int64
    Origin    'O' commit_lsn:int64 name:string
    Relation  'R' oid:int32 namespace:string name:string replica_identity:int8
                  ncols:int16 {flags:int8 name:string type_oid:int32 type_modifier:int32}*
    Type      'Y' oid:int32 namespace:string name:string
    Insert    'I' oid:int32 'N' tuple
    Update    'U' oid:int32 ['K' tuple | 'O' tuple] 'N' tuple
    Delete    'D' oid:int32 ('K' | 'O') tuple
    Truncate  'T' nrels:int32 options:int8 oid:int32*
    Message   'M' flags:int8 lsn:int64 prefix:string length:int32 content:bytes
    tuple     ncols:int16 {kind:byte ('n' null | 'u' unchanged TOAST | 't' text | 'b' binary,
                           with length:int32 bytes for 't' and 'b')}*

A Relation message precedes the first change of a table in a session and again after its
definition changed (ALTER TABLE), so a consumer keeps the latest one per oid. Column flag 1
marks a replica identity (key) column. In an Update, 'K' carries the old key (REPLICA
IDENTITY DEFAULT / USING INDEX, only when the key changed) and 'O' the whole old row
(REPLICA IDENTITY FULL).
"""

from __future__ import annotations

import datetime
import enum
import struct
from dataclasses import dataclass

from riverbed.cdc.errors import PgOutputError

__all__ = [
    "Begin",
    "Column",
    "Commit",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Message",
    "Origin",
    "Relation",
    "Truncate",
    "TupleValue",
    "Type",
    "Unchanged",
    "Update",
    "decode_message",
    "pg_time_to_datetime",
]

POSTGRES_EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
KEY_COLUMN_FLAG = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")


class ReplicaIdentity(enum.Enum):
    """``relreplident``: which old values updates and deletes carry."""

    DEFAULT = "d"  # the primary key
    NOTHING = "n"
    FULL = "f"  # every column
    INDEX = "i"  # a chosen unique index


class Unchanged(enum.Enum):
    """A TOASTed value the update did not change: pgoutput sends no value for it."""

    TOAST = "u"


TupleValue = bytes | None | Unchanged
"""A column in a tuple: its text (or binary) form, None for SQL NULL, or Unchanged.TOAST."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Begin:
    final_lsn: int
    commit_time_us: int
    xid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_time_us: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: ReplicaIdentity
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Insert:
    relation_oid: int
    new: tuple[TupleValue, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    relation_oid: int
    old: tuple[TupleValue, ...] | None
    """The old key ('K') or the whole old row ('O'), if the server sent one."""
    old_is_key_only: bool
    new: tuple[TupleValue, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete:
    relation_oid: int
    old: tuple[TupleValue, ...]
    old_is_key_only: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncate:
    relation_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = (
    Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate | LogicalMessage
)


def pg_time_to_datetime(microseconds: int) -> datetime.datetime:
    """A pgoutput timestamp (µs since 2000-01-01 UTC) as an aware datetime."""
    return POSTGRES_EPOCH + datetime.timedelta(microseconds=microseconds)


class _Reader:
    """A cursor over one message; every read checks the bounds."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise PgOutputError(f"message ends at byte {len(self.data)}, wanted {end}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, shape: struct.Struct) -> int:
        return int(shape.unpack(self.take(shape.size))[0])

    def byte(self) -> str:
        return chr(self.take(1)[0])

    def string(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise PgOutputError("string without its terminating NUL")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PgOutputError(f"string is not UTF-8: {raw[:40]!r}") from exc

    def tuple(self) -> tuple[TupleValue, ...]:
        count = self.unpack(_I16)
        if count < 0:
            raise PgOutputError(f"tuple with {count} columns")
        values: list[TupleValue] = []
        for _ in range(count):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(Unchanged.TOAST)
            elif kind in ("t", "b"):
                values.append(self.take(self.unpack(_I32)))
            else:
                raise PgOutputError(f"unknown tuple column kind {kind!r}")
        return tuple(values)

    def end(self, what: str) -> None:
        if self.pos != len(self.data):
            raise PgOutputError(f"{len(self.data) - self.pos} bytes after a {what} message")


def decode_message(data: bytes) -> Message:
    """The message in ``data`` (exactly one); PgOutputError if it is not one."""
    reader = _Reader(bytes(data))
    kind = reader.byte()
    message: Message
    if kind == "B":
        message = Begin(
            final_lsn=reader.unpack(_U64),
            commit_time_us=reader.unpack(_I64),
            xid=reader.unpack(_U32),
        )
    elif kind == "C":
        message = Commit(
            flags=reader.unpack(_I8),
            commit_lsn=reader.unpack(_U64),
            end_lsn=reader.unpack(_U64),
            commit_time_us=reader.unpack(_I64),
        )
    elif kind == "O":
        message = Origin(commit_lsn=reader.unpack(_U64), name=reader.string())
    elif kind == "R":
        message = _relation(reader)
    elif kind == "Y":
        message = Type(oid=reader.unpack(_U32), namespace=reader.string(), name=reader.string())
    elif kind == "I":
        oid = reader.unpack(_U32)
        if reader.byte() != "N":
            raise PgOutputError("an Insert's tuple must be marked 'N'")
        message = Insert(relation_oid=oid, new=reader.tuple())
    elif kind == "U":
        message = _update(reader)
    elif kind == "D":
        oid = reader.unpack(_U32)
        marker = reader.byte()
        if marker not in ("K", "O"):
            raise PgOutputError(f"a Delete's old tuple is marked {marker!r}, not 'K' or 'O'")
        message = Delete(relation_oid=oid, old=reader.tuple(), old_is_key_only=marker == "K")
    elif kind == "T":
        count = reader.unpack(_I32)
        if count < 0:
            raise PgOutputError(f"Truncate of {count} relations")
        options = reader.unpack(_I8)
        oids = tuple(reader.unpack(_U32) for _ in range(count))
        message = Truncate(
            relation_oids=oids, cascade=bool(options & 1), restart_identity=bool(options & 2)
        )
    elif kind == "M":
        flags = reader.unpack(_I8)
        lsn = reader.unpack(_U64)
        prefix = reader.string()
        content = reader.take(reader.unpack(_I32))
        message = LogicalMessage(
            transactional=bool(flags & 1), lsn=lsn, prefix=prefix, content=content
        )
    else:
        raise PgOutputError(f"unknown pgoutput message type {kind!r}")
    reader.end(type(message).__name__)
    return message


def _relation(reader: _Reader) -> Relation:
    oid = reader.unpack(_U32)
    namespace = reader.string()
    name = reader.string()
    identity = chr(reader.unpack(_I8) & 0xFF)
    try:
        replica_identity = ReplicaIdentity(identity)
    except ValueError:
        raise PgOutputError(f"unknown replica identity {identity!r}") from None
    count = reader.unpack(_I16)
    if count < 0:
        raise PgOutputError(f"relation with {count} columns")
    columns = []
    for _ in range(count):
        flags = reader.unpack(_I8)
        columns.append(
            Column(
                name=reader.string(),
                type_oid=reader.unpack(_U32),
                type_modifier=reader.unpack(_I32),
                is_key=bool(flags & KEY_COLUMN_FLAG),
            )
        )
    return Relation(
        oid=oid,
        namespace=namespace,
        name=name,
        replica_identity=replica_identity,
        columns=tuple(columns),
    )


def _update(reader: _Reader) -> Update:
    oid = reader.unpack(_U32)
    marker = reader.byte()
    old = None
    key_only = False
    if marker in ("K", "O"):
        key_only = marker == "K"
        old = reader.tuple()
        marker = reader.byte()
    if marker != "N":
        raise PgOutputError(f"an Update's new tuple is marked {marker!r}, not 'N'")
    return Update(relation_oid=oid, old=old, old_is_key_only=key_only, new=reader.tuple())
