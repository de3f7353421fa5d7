"""The pgoutput decoder against what a real PostgreSQL sends, and against garbage."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.cdc.errors import PgOutputError
from riverbed.cdc.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Relation,
    ReplicaIdentity,
    Truncate,
    Unchanged,
    Update,
    decode_message,
    pg_time_to_datetime,
)
from riverbed.testing.postgres import PostgresCluster

BIG = "x" * 100_000  # stored out of line (TOAST): an update that leaves it is sent as 'u'


@pytest.fixture
def messages(postgres: PostgresCluster) -> Iterator[list[Message]]:
    """Every message pgoutput produces for a script of changes, decoded."""
    connection = psycopg2.connect(postgres.dsn)
    connection.autocommit = True
    cursor = connection.cursor()
    cursor.execute("DROP TABLE IF EXISTS accounts; DROP PUBLICATION IF EXISTS decoder_test")
    cursor.execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, note text, "
        "big text); ALTER TABLE accounts ALTER COLUMN big SET STORAGE EXTERNAL"
    )
    cursor.execute("CREATE PUBLICATION decoder_test FOR TABLE accounts")
    cursor.execute("SELECT pg_create_logical_replication_slot('decoder_test', 'pgoutput')")
    try:
        cursor.execute("INSERT INTO accounts VALUES (1, 'ada', NULL, %s)", (BIG,))
        cursor.execute("BEGIN")
        cursor.execute("UPDATE accounts SET owner = 'ada l.' WHERE id = 1")
        cursor.execute("UPDATE accounts SET id = 2 WHERE id = 1")
        cursor.execute("SELECT pg_logical_emit_message(true, 'riverbed', 'hello')")
        cursor.execute("COMMIT")
        cursor.execute("ALTER TABLE accounts ADD COLUMN tier text DEFAULT 'gold'")
        cursor.execute("INSERT INTO accounts (id, owner) VALUES (3, 'bob')")
        cursor.execute("ALTER TABLE accounts REPLICA IDENTITY FULL")
        cursor.execute("DELETE FROM accounts WHERE id = 3")
        cursor.execute("TRUNCATE accounts")
        cursor.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes('decoder_test', NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'decoder_test', 'messages', 'true')"
        )
        yield [decode_message(bytes(row[0])) for row in cursor.fetchall()]
    finally:
        cursor.execute("SELECT pg_drop_replication_slot('decoder_test')")
        connection.close()


def test_every_change_of_a_real_server_decodes(messages: list[Message]) -> None:
    kinds = [type(m).__name__ for m in messages]
    assert kinds == [
        "Begin", "Relation", "Insert", "Commit",
        "Begin", "Update", "Update", "LogicalMessage", "Commit",
        "Begin", "Relation", "Insert", "Commit",
        "Begin", "Relation", "Delete", "Commit",
        "Begin", "Relation", "Truncate", "Commit",
    ]  # fmt: skip
    relation = messages[1]
    assert isinstance(relation, Relation)
    assert (relation.namespace, relation.name) == ("public", "accounts")
    assert relation.replica_identity is ReplicaIdentity.DEFAULT
    assert [(c.name, c.is_key) for c in relation.columns] == [
        ("id", True), ("owner", False), ("note", False), ("big", False)
    ]  # fmt: skip
    insert = messages[2]
    assert isinstance(insert, Insert) and insert.relation_oid == relation.oid
    assert insert.new == (b"1", b"ada", None, BIG.encode())

    begin, commit = messages[4], messages[8]
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert begin.final_lsn == commit.commit_lsn and commit.end_lsn > commit.commit_lsn
    assert begin.commit_time_us == commit.commit_time_us
    assert pg_time_to_datetime(commit.commit_time_us).year >= 2024

    same_key, new_key = messages[5], messages[6]
    assert isinstance(same_key, Update) and same_key.old is None  # key unchanged: no old
    assert same_key.new == (b"1", b"ada l.", None, Unchanged.TOAST)
    assert isinstance(new_key, Update) and new_key.old_is_key_only
    assert new_key.old == (b"1", None, None, None)  # the old key only
    emitted = messages[7]
    assert isinstance(emitted, LogicalMessage)
    assert (emitted.transactional, emitted.prefix, emitted.content) == (True, "riverbed", b"hello")

    altered = messages[10]
    assert isinstance(altered, Relation) and altered.columns[-1].name == "tier"
    bob = (b"3", b"bob", None, None, b"gold")
    assert messages[11] == Insert(relation_oid=relation.oid, new=bob)
    full = messages[14]
    assert isinstance(full, Relation) and full.replica_identity is ReplicaIdentity.FULL
    delete = messages[15]
    assert isinstance(delete, Delete) and not delete.old_is_key_only
    assert delete.old == bob  # the whole old row
    truncate = messages[19]
    assert isinstance(truncate, Truncate) and truncate.relation_oids == (relation.oid,)


def test_a_cut_or_padded_message_is_refused() -> None:
    """An Insert of (1, NULL): every shorter prefix and any trailing byte fail."""
    insert = (
        bytes.fromhex("49")
        + (16384).to_bytes(4, "big")
        + b"N"
        + bytes.fromhex("00027400000001316e")
    )
    assert decode_message(insert) == Insert(relation_oid=16384, new=(b"1", None))
    for cut in range(len(insert)):
        with pytest.raises(PgOutputError):
            decode_message(insert[:cut])
    with pytest.raises(PgOutputError, match="after a Insert"):
        decode_message(insert + b"\0")


@given(st.binary(max_size=200))
def test_garbage_decodes_or_raises_pgoutput_error(data: bytes) -> None:
    with contextlib.suppress(PgOutputError):
        decode_message(data)
