"""From decoded pgoutput messages to CDC records (riverbed.cdc.changes), fed by hand-built
messages: the envelope, tombstones, key changes, replica identities, TOAST, positions."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.cdc.changes import (
    ChangeTranslator,
    Position,
    Record,
    SnapshotRecords,
    TransactionEnd,
    dumps,
)
from riverbed.cdc.envelope import INT4, UNAVAILABLE_VALUE, Source, change_event
from riverbed.cdc.pgoutput import (
    Begin,
    Column,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Relation,
    ReplicaIdentity,
    Truncate,
    TupleValue,
    Unchanged,
    Update,
)
from riverbed.cdc.preflight import TableInfo

TEXT = 25
USERS_OID, OTHER_OID = 16_385, 16_999
CLOCK_MS = 1_800_000_000_000  # what the translator's clock says: the envelope's ts_ms
COMMIT_TIME = datetime.datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=datetime.UTC)
COMMIT_TIME_US = (COMMIT_TIME - datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)) // (
    datetime.timedelta(microseconds=1)
)
COMMIT_TIME_MS = (COMMIT_TIME - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // (
    datetime.timedelta(milliseconds=1)
)
FINAL_LSN = 0x16_B374_D848
XID = 750
TOPIC = "shop.public.users"

ID = Column(name="id", type_oid=INT4, type_modifier=-1, is_key=True)
NAME = Column(name="name", type_oid=TEXT, type_modifier=-1, is_key=False)
BIO = Column(name="bio", type_oid=TEXT, type_modifier=-1, is_key=False)
EMAIL = Column(name="email", type_oid=TEXT, type_modifier=-1, is_key=False)


def users_relation(
    identity: ReplicaIdentity = ReplicaIdentity.DEFAULT,
    columns: tuple[Column, ...] = (ID, NAME, BIO),
) -> Relation:
    return Relation(
        oid=USERS_OID,
        namespace="public",
        name="users",
        replica_identity=identity,
        columns=columns,
    )


def audit_relation(*columns: Column) -> Relation:
    """``public.audit``, a table the translator does not capture."""
    return Relation(
        oid=OTHER_OID,
        namespace="public",
        name="audit",
        replica_identity=ReplicaIdentity.DEFAULT,
        columns=columns,
    )


def table_info(identity: str = "d") -> TableInfo:
    return TableInfo(schema="public", table="users", key_columns=("id",), replica_identity=identity)


def translator(*tables: TableInfo) -> ChangeTranslator:
    tables = tables or (table_info(),)
    return ChangeTranslator(
        prefix="shop",
        db="inventory",
        tables={(t.schema, t.table): t for t in tables},
        clock_ms=lambda: CLOCK_MS,
    )


def begin(final_lsn: int = FINAL_LSN, xid: int = XID) -> Begin:
    return Begin(final_lsn=final_lsn, commit_time_us=COMMIT_TIME_US, xid=xid)


def commit(end_lsn: int) -> Commit:
    return Commit(flags=0, commit_lsn=end_lsn - 8, end_lsn=end_lsn, commit_time_us=COMMIT_TIME_US)


def records(translator: ChangeTranslator, message: Message, lsn: int = 0) -> list[Record]:
    result = translator.feed(message, lsn)
    assert isinstance(result, list), result
    return result


def started(
    relation: Relation | None = None, *, identity: str = "d", lsn: int = FINAL_LSN
) -> ChangeTranslator:
    """A translator that has seen the users Relation and a Begin."""
    t = translator(table_info(identity))
    assert records(t, relation or users_relation()) == []
    assert records(t, begin(lsn)) == []
    return t


def value(record: Record) -> dict[str, Any]:
    assert record.value is not None, "a tombstone"
    parsed = json.loads(record.value)
    assert isinstance(parsed, dict)
    return parsed


def key(record: Record) -> dict[str, Any]:
    parsed = json.loads(record.key)
    assert isinstance(parsed, dict)
    return parsed


def brief(record: Record) -> tuple[Any, ...]:
    """(op or "tombstone", key, before, after) of a record."""
    if record.value is None:
        return ("tombstone", key(record), None, None)
    v = value(record)
    return (v["op"], key(record), v["before"], v["after"])


# -- inserts, updates, deletes ---------------------------------------------------------------


def test_an_insert_is_a_create_with_debezium_s_envelope_and_source() -> None:
    t = started()
    [record] = records(t, Insert(relation_oid=USERS_OID, new=(b"1", "Zoë".encode(), None)), 4242)
    assert record.topic == TOPIC
    assert record.key == b'{"id":1}'
    assert record.position == Position(FINAL_LSN, 1)
    assert value(record) == {
        "before": None,
        "after": {"id": 1, "name": "Zoë", "bio": None},
        "op": "c",
        "ts_ms": CLOCK_MS,
        "source": {
            "version": "riverbed",
            "connector": "postgresql",
            "name": "shop",
            "db": "inventory",
            "schema": "public",
            "table": "users",
            "txId": XID,
            "lsn": 4242,  # the lsn the message was fed with, not the commit's
            "commitLsn": FINAL_LSN,  # the commit's: Begin.final_lsn
            "ts_ms": COMMIT_TIME_MS,
            "snapshot": "false",
        },
    }
    assert "Zoë".encode() in (record.value or b"")  # UTF-8, not JSON escapes
    assert t.feed(commit(FINAL_LSN + 48), 4300) == TransactionEnd(FINAL_LSN + 48, COMMIT_TIME_MS)


def test_the_commit_time_is_the_begin_s_microseconds_since_2000_in_milliseconds() -> None:
    t = translator()
    records(t, users_relation())
    for us, expected_ms in [
        (0, 946_684_800_000),
        (999, 946_684_800_000),
        (1000, 946_684_800_001),
        (-1, 946_684_799_999),
        (COMMIT_TIME_US, COMMIT_TIME_MS),
    ]:
        records(t, Begin(final_lsn=FINAL_LSN, commit_time_us=us, xid=1))
        [record] = records(t, Insert(relation_oid=USERS_OID, new=(b"1", b"a", b"b")))
        assert value(record)["source"]["ts_ms"] == expected_ms, us
        t.feed(commit(FINAL_LSN + 8), 0)


def test_an_update_under_replica_identity_default_has_no_before() -> None:
    t = started()
    [record] = records(
        t, Update(relation_oid=USERS_OID, old=None, old_is_key_only=False, new=(b"1", b"b", None))
    )
    assert brief(record) == ("u", {"id": 1}, None, {"id": 1, "name": "b", "bio": None})
    assert record.position == Position(FINAL_LSN, 1)


def test_a_delete_is_followed_by_a_tombstone_of_the_same_key() -> None:
    t = started()
    delete, tombstone = records(
        t, Delete(relation_oid=USERS_OID, old=(b"7", None, None), old_is_key_only=True), 99
    )
    assert brief(delete) == ("d", {"id": 7}, {"id": 7}, None)
    assert value(delete)["source"]["lsn"] == 99
    assert tombstone == Record(TOPIC, b'{"id":7}', None, Position(FINAL_LSN, 2))
    assert delete.position == Position(FINAL_LSN, 1)


def test_a_delete_under_replica_identity_full_has_the_whole_old_row() -> None:
    t = started(users_relation(ReplicaIdentity.FULL), identity="f")
    delete, tombstone = records(
        t, Delete(relation_oid=USERS_OID, old=(b"7", b"x", b"y"), old_is_key_only=False)
    )
    assert brief(delete) == ("d", {"id": 7}, {"id": 7, "name": "x", "bio": "y"}, None)
    assert brief(tombstone) == ("tombstone", {"id": 7}, None, None)


def full_identity_update(old: tuple[TupleValue, ...], new: tuple[TupleValue, ...]) -> Record:
    """The one record of an Update of users under REPLICA IDENTITY FULL (the whole old row)."""
    t = started(users_relation(ReplicaIdentity.FULL), identity="f")
    [record] = records(t, Update(relation_oid=USERS_OID, old=old, old_is_key_only=False, new=new))
    return record


def test_an_update_under_replica_identity_full_has_the_old_row_as_before() -> None:
    record = full_identity_update((b"1", b"old", b"bio"), (b"1", b"new", b"bio"))
    assert brief(record) == (
        "u",
        {"id": 1},
        {"id": 1, "name": "old", "bio": "bio"},
        {"id": 1, "name": "new", "bio": "bio"},
    )


@pytest.mark.parametrize("identity", [ReplicaIdentity.DEFAULT, ReplicaIdentity.FULL])
def test_an_update_that_changes_the_key_is_a_delete_a_tombstone_and_a_create(
    identity: ReplicaIdentity,
) -> None:
    full = identity is ReplicaIdentity.FULL
    t = started(users_relation(identity), identity=identity.value)
    old: tuple[TupleValue, ...] = (b"1", b"old", b"bio") if full else (b"1", None, None)
    result = records(
        t,
        Update(relation_oid=USERS_OID, old=old, old_is_key_only=not full, new=(b"2", b"new", None)),
        555,
    )
    before = {"id": 1, "name": "old", "bio": "bio"} if full else {"id": 1}
    assert [brief(r) for r in result] == [
        ("d", {"id": 1}, before, None),
        ("tombstone", {"id": 1}, None, None),
        ("c", {"id": 2}, None, {"id": 2, "name": "new", "bio": None}),
    ]
    assert [r.position for r in result] == [Position(FINAL_LSN, seq) for seq in (1, 2, 3)]
    assert all(value(r)["source"]["lsn"] == 555 for r in (result[0], result[2]))


def test_unchanged_toast_values_come_from_the_old_row_under_replica_identity_full() -> None:
    record = full_identity_update(
        (b"1", b"old", b"a very long bio"), (b"1", b"new", Unchanged.TOAST)
    )
    assert value(record)["after"] == {"id": 1, "name": "new", "bio": "a very long bio"}
    assert value(record)["before"] == {"id": 1, "name": "old", "bio": "a very long bio"}


def test_unchanged_toast_values_without_an_old_row_are_debezium_s_placeholder() -> None:
    t = started()
    [record] = records(
        t,
        Update(
            relation_oid=USERS_OID,
            old=None,
            old_is_key_only=False,
            new=(b"1", b"new", Unchanged.TOAST),
        ),
    )
    assert UNAVAILABLE_VALUE == "__debezium_unavailable_value"
    assert brief(record) == (
        "u",
        {"id": 1},
        None,
        {"id": 1, "name": "new", "bio": UNAVAILABLE_VALUE},
    )
    # An old key ('K') is no old row: the value is still unavailable.
    result = records(
        t,
        Update(
            relation_oid=USERS_OID,
            old=(b"1", None, None),
            old_is_key_only=True,
            new=(b"3", b"new", Unchanged.TOAST),
        ),
    )
    assert brief(result[-1]) == (
        "c",
        {"id": 3},
        None,
        {"id": 3, "name": "new", "bio": UNAVAILABLE_VALUE},
    )


def test_an_old_key_that_did_not_change_gives_a_plain_update_without_before() -> None:
    # PostgreSQL 16+ also sends the old key when a key column is stored out of line.
    t = started()
    [record] = records(
        t,
        Update(
            relation_oid=USERS_OID,
            old=(b"1", None, None),
            old_is_key_only=True,
            new=(b"1", b"n", None),
        ),
    )
    assert brief(record) == ("u", {"id": 1}, None, {"id": 1, "name": "n", "bio": None})


def test_the_key_is_the_key_columns_in_key_order() -> None:
    columns = (
        Column(name="id", type_oid=INT4, type_modifier=-1, is_key=True),
        Column(name="note", type_oid=TEXT, type_modifier=-1, is_key=False),
        Column(name="tenant", type_oid=TEXT, type_modifier=-1, is_key=True),
    )
    info = TableInfo(
        schema="public", table="users", key_columns=("tenant", "id"), replica_identity="d"
    )
    t = translator(info)
    records(t, users_relation(columns=columns))
    records(t, begin())
    [record] = records(t, Insert(relation_oid=USERS_OID, new=(b"5", b"x", "Å".encode())))
    assert record.key == '{"tenant":"Å","id":5}'.encode()


# -- schema changes, other tables, truncate --------------------------------------------------


def test_a_later_relation_message_adds_the_new_column_to_later_events() -> None:
    t = started()
    [before_alter] = records(t, Insert(relation_oid=USERS_OID, new=(b"1", b"a", b"b")))
    assert value(before_alter)["after"] == {"id": 1, "name": "a", "bio": "b"}
    # ALTER TABLE users ADD COLUMN email text: PostgreSQL sends the Relation again.
    assert records(t, users_relation(columns=(ID, NAME, BIO, EMAIL))) == []
    [after_alter] = records(t, Insert(relation_oid=USERS_OID, new=(b"2", b"c", b"d", b"e@x")))
    assert value(after_alter)["after"] == {"id": 2, "name": "c", "bio": "d", "email": "e@x"}
    [update] = records(
        t,
        Update(
            relation_oid=USERS_OID, old=None, old_is_key_only=False, new=(b"1", b"a", b"b", None)
        ),
    )
    assert value(update)["after"] == {"id": 1, "name": "a", "bio": "b", "email": None}
    assert [before_alter.position, after_alter.position, update.position] == [
        Position(FINAL_LSN, 1),
        Position(FINAL_LSN, 2),
        Position(FINAL_LSN, 3),
    ]


def test_changes_of_tables_that_are_not_captured_are_ignored() -> None:
    t = started()
    assert records(t, audit_relation(ID, NAME)) == []
    assert records(t, Insert(relation_oid=OTHER_OID, new=(b"1", b"a"))) == []
    assert (
        records(
            t, Update(relation_oid=OTHER_OID, old=None, old_is_key_only=False, new=(b"1", b"b"))
        )
        == []
    )
    assert records(t, Delete(relation_oid=OTHER_OID, old=(b"1", None), old_is_key_only=True)) == []
    assert (
        records(t, Truncate(relation_oids=(OTHER_OID,), cascade=False, restart_identity=False))
        == []
    )
    # A table of the same name in another schema is another table.
    elsewhere = Relation(
        oid=OTHER_OID + 1,
        namespace="archive",
        name="users",
        replica_identity=ReplicaIdentity.DEFAULT,
        columns=(ID, NAME, BIO),
    )
    records(t, elsewhere)
    assert records(t, Insert(relation_oid=OTHER_OID + 1, new=(b"1", b"a", b"b"))) == []
    # ... and the ignored changes took no sequence numbers.
    [record] = records(t, Insert(relation_oid=USERS_OID, new=(b"1", b"a", b"b")))
    assert record.position == Position(FINAL_LSN, 1)


def test_a_truncate_is_op_t_with_an_empty_key_for_each_captured_table() -> None:
    t = started()
    records(t, audit_relation(ID))
    [record] = records(
        t,
        Truncate(relation_oids=(OTHER_OID, USERS_OID), cascade=True, restart_identity=False),
        777,
    )
    assert record.topic == TOPIC
    assert record.key == b"{}"
    v = value(record)
    assert (v["op"], v["before"], v["after"]) == ("t", None, None)
    assert v["source"]["table"] == "users" and v["source"]["lsn"] == 777
    assert record.position == Position(FINAL_LSN, 1)


def test_logical_messages_carry_no_records() -> None:
    t = started()
    message = LogicalMessage(transactional=True, lsn=1, prefix="p", content=b"x")
    assert records(t, message) == []


# -- positions and errors --------------------------------------------------------------------


def test_positions_count_each_transaction_s_records_from_one_and_only_grow() -> None:
    t = translator()
    records(t, users_relation())
    seen: list[Position] = []
    for n, final_lsn in enumerate([0x1000, 0x2000, 0x1_0000_0000]):
        records(t, begin(final_lsn, xid=100 + n))
        result = records(t, Insert(relation_oid=USERS_OID, new=(b"1", b"a", None)))
        result += records(
            t, Delete(relation_oid=USERS_OID, old=(b"1", None, None), old_is_key_only=True)
        )
        seen += [r.position for r in result if r.position is not None]
        end = TransactionEnd(final_lsn + 16, COMMIT_TIME_MS)
        assert t.feed(commit(final_lsn + 16), final_lsn + 16) == end
    assert seen == [
        Position(lsn, seq) for lsn in (0x1000, 0x2000, 0x1_0000_0000) for seq in (1, 2, 3)
    ]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    for position in seen:
        assert Position.from_header(position.header()) == position
        assert Position.from_header(position.header().decode()) == position


def test_a_change_before_its_relation_is_an_error() -> None:
    t = translator()
    records(t, begin())
    with pytest.raises(ValueError, match=str(USERS_OID)):
        t.feed(Insert(relation_oid=USERS_OID, new=(b"1", b"a", b"b")), 0)
    with pytest.raises(ValueError):
        t.feed(Delete(relation_oid=USERS_OID, old=(b"1", None, None), old_is_key_only=True), 0)


def test_a_change_outside_a_transaction_is_an_error() -> None:
    t = translator()
    records(t, users_relation())
    with pytest.raises(ValueError, match="Begin"):
        t.feed(Insert(relation_oid=USERS_OID, new=(b"1", b"a", b"b")), 0)
    records(t, begin())
    t.feed(commit(FINAL_LSN + 8), 0)
    with pytest.raises(ValueError, match="Begin"):
        t.feed(Insert(relation_oid=USERS_OID, new=(b"1", b"a", b"b")), 0)


def test_a_snapshot_row_is_op_r_without_a_position() -> None:
    encoder = SnapshotRecords(
        prefix="shop", db="inventory", table=table_info(), lsn=FINAL_LSN, tx_id=12
    )
    row = {"id": 3, "name": "Zoë", "bio": None}
    for last in (False, True, True, False):  # the cached parts follow the flag and the clock
        record = encoder.record(row, last=last, now_ms=CLOCK_MS)
        assert (record.topic, record.key, record.position) == (TOPIC, b'{"id":3}', None)
        source = Source(
            name="shop", db="inventory", schema="public", table="users", tx_id=12,
            lsn=FINAL_LSN, commit_lsn=FINAL_LSN, commit_ts_ms=CLOCK_MS,
            snapshot="last" if last else "true",
        )  # fmt: skip
        # Byte for byte what change_event gives.
        expected = change_event(op="r", before=None, after=row, source=source, ts_ms=CLOCK_MS)
        assert record.value == dumps(expected)
    later = value(encoder.record(row, last=False, now_ms=CLOCK_MS + 5))
    assert later["ts_ms"] == later["source"]["ts_ms"] == CLOCK_MS + 5
    assert later["source"]["snapshot"] == "true"


# -- the topic converges to the table ---------------------------------------------------------

OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "update", "rekey", "delete"]),
        st.integers(0, 5),  # which row (by position in the table)
        st.integers(0, 9),  # a new key or value
        st.booleans(),  # commit after this change
    ),
    max_size=40,
)


def _messages(
    operations: Sequence[tuple[str, int, int, bool]], full: bool
) -> tuple[list[Message], dict[int, str]]:
    """The pgoutput messages a session of ``operations`` sends, and the table afterwards."""
    table: dict[int, str] = {}
    messages: list[Message] = [
        users_relation(ReplicaIdentity.FULL if full else ReplicaIdentity.DEFAULT)
    ]
    lsn, open_transaction = 0x100, False
    for op, which, n, commit_after in operations:
        if not open_transaction:
            lsn += 0x100
            messages.append(begin(lsn, xid=lsn))
            open_transaction = True
        ids = sorted(table)
        if op == "insert" or not ids:
            new_id = max(table, default=0) + 1
            table[new_id] = f"v{n}"
            messages.append(
                Insert(relation_oid=USERS_OID, new=(str(new_id).encode(), f"v{n}".encode(), None))
            )
        else:
            row_id = ids[which % len(ids)]
            old_full: tuple[TupleValue, ...] = (str(row_id).encode(), table[row_id].encode(), None)
            old_key: tuple[TupleValue, ...] = (str(row_id).encode(), None, None)
            if op == "delete":
                del table[row_id]
                old = old_full if full else old_key
                messages.append(Delete(relation_oid=USERS_OID, old=old, old_is_key_only=not full))
            else:
                new_id = row_id
                if op == "rekey":
                    new_id = max(table) + 1 + n
                del table[row_id]
                table[new_id] = f"w{n}"
                changed = new_id != row_id
                old2: tuple[TupleValue, ...] | None = (
                    old_full if full else (old_key if changed else None)
                )
                messages.append(
                    Update(
                        relation_oid=USERS_OID,
                        old=old2,
                        old_is_key_only=not full and changed,
                        new=(str(new_id).encode(), f"w{n}".encode(), None),
                    )
                )
        if commit_after:
            messages.append(commit(lsn + 0x80))
            open_transaction = False
    if open_transaction:
        messages.append(commit(lsn + 0x80))
    return messages, table


@settings(max_examples=150, deadline=None)
@given(operations=OPERATIONS, full=st.booleans())
def test_compacting_the_records_gives_the_table(
    operations: list[tuple[str, int, int, bool]], full: bool
) -> None:
    messages, table = _messages(operations, full)
    t = translator(table_info("f" if full else "d"))
    latest: dict[bytes, bytes | None] = {}
    positions: list[Position] = []
    ends: list[int] = []
    for i, message in enumerate(messages):
        result = t.feed(message, i)
        if isinstance(result, TransactionEnd):
            ends.append(result.end_lsn)
            continue
        for record in result:
            assert record.topic == TOPIC
            assert record.position is not None
            positions.append(record.position)
            latest[record.key] = record.value
            if record.value is not None:
                v = value(record)
                after = v["after"]
                assert v["op"] in ("c", "u", "d")
                assert (v["op"] == "d") == (after is None)
                if after is not None:
                    assert key(record) == {"id": after["id"]}
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert ends == sorted(ends)
    live = {json.loads(k)["id"]: value_of_after(v) for k, v in latest.items() if v is not None}
    assert live == table
    # Every delete is followed at once by its tombstone (re-run to see the whole sequence).
    t = translator(table_info("f" if full else "d"))
    flat = [r for m in messages if isinstance(res := t.feed(m, 0), list) for r in res]
    for i, record in enumerate(flat):
        if record.value is not None and value(record)["op"] == "d":
            assert flat[i + 1].value is None and flat[i + 1].key == record.key


def value_of_after(raw: bytes) -> str:
    after = json.loads(raw)["after"]
    assert after is not None, "the latest record of a live key is a delete"
    name = after["name"]
    assert isinstance(name, str)
    return name
