"""The search store on real Tantivy indexes in temporary directories: upserts, updates,
deletes, truncates, key changes and TOAST placeholders as word and column queries see them;
positions committed with the rows (or not at all); the read-only search API; the directories
it refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import tantivy

from riverbed.sinks.changes import UNAVAILABLE_VALUE, Change, SinkError, change_of
from riverbed.sinks.search_store import Hit, SearchQueryError, SearchStore, search
from tests.support.sinks import cdc_change, opened

PRODUCTS = "shop.public.products"
ORDERS = "shop.public.orders"


def cdc(op: str, key: dict[str, Any], after: dict[str, Any] | None = None, *,
        topic: str = PRODUCTS) -> Change:  # fmt: skip
    return cdc_change(topic, op, key, after)


def tombstone(key: dict[str, Any], *, topic: str = PRODUCTS) -> Change:
    return change_of(topic, orjson.dumps(key), None, cdc=True)


def product(product_id: int, title: str, category: str = "shoes", **more: Any) -> Change:
    row = {"id": product_id, "title": title, "category": category, "price": 10.5, **more}
    return cdc("c", {"id": product_id}, row)


def ids(directory: Path, query: str, *, limit: int = 10) -> list[str]:
    return [hit.id for hit in search(directory, query, limit=limit)]


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "index"


@pytest.fixture
def store(index: Path) -> Iterator[SearchStore]:
    yield from opened(SearchStore(index))


def test_a_row_is_found_by_any_word_of_its_text_columns_and_stored_as_it_came(
    store: SearchStore, index: Path
) -> None:
    row = {"id": 1, "title": "Red running shoes", "category": "sport", "price": 12.0,
           "added": "2024-01-02T03:04:05Z", "attributes": {"colour": "crimson"},
           "note": None}  # fmt: skip
    store.apply([cdc("c", {"id": 1}, row)])
    store.commit({(PRODUCTS, 0): 1})
    hits = search(index, "running")
    assert hits == [Hit(collection="products", id="1", score=hits[0].score, row=row)]
    assert hits[0].score > 0
    assert ids(index, "SPORT") == ["1"]
    assert ids(index, "crimson") == ["1"]  # a string inside a JSON column
    assert ids(index, "price:12") == ["1"]
    assert ids(index, "walking") == []
    assert orjson.loads(orjson.dumps(search(index, "sport")[0]))["row"] == row


def test_an_update_changes_what_a_word_finds(store: SearchStore, index: Path) -> None:
    store.apply([product(1, "Canvas sneaker"), product(2, "Leather boot")])
    store.commit({})
    store.apply([cdc("u", {"id": 1}, {"id": 1, "title": "Suede loafer", "category": "shoes"})])
    store.commit({})
    assert ids(index, "loafer") == ["1"]
    assert ids(index, "sneaker") == []
    assert sorted(ids(index, "shoes")) == ["1", "2"]
    assert store.rows("products")["1"] == {"id": 1, "title": "Suede loafer", "category": "shoes"}


def test_the_last_change_to_a_row_in_a_batch_wins(store: SearchStore, index: Path) -> None:
    store.apply([product(1, "first"), product(1, "second"), cdc("d", {"id": 1}),
                 product(1, "third")])  # fmt: skip
    store.commit({})
    assert ids(index, "first second") == []
    assert ids(index, "third") == ["1"]
    assert list(store.rows("products")) == ["1"]


def test_a_delete_or_a_tombstone_removes_the_row(store: SearchStore, index: Path) -> None:
    store.apply([product(1, "kept"), product(2, "deleted"), product(3, "tombstoned")])
    store.commit({})
    store.apply([cdc("d", {"id": 2}), tombstone({"id": 2}), tombstone({"id": 3})])
    store.commit({})
    assert sorted(store.rows("products")) == ["1"]
    assert ids(index, "deleted tombstoned") == []


def test_changelog_entries_are_rows_keyed_by_the_key_json(store: SearchStore, index: Path) -> None:
    key = orjson.dumps({"cart": "c1"})
    store.apply([change_of("carts", key, orjson.dumps({"items": ["apple pie"]}), cdc=False)])
    store.commit({})
    assert search(index, "apple")[0].id == '{"cart":"c1"}'
    store.apply([change_of("carts", key, None, cdc=False)])
    store.commit({})
    assert ids(index, "apple") == []


def test_a_truncate_empties_its_table_only(store: SearchStore, index: Path) -> None:
    order = cdc("c", {"id": 1}, {"id": 1, "note": "shoes for ann"}, topic=ORDERS)
    store.apply([product(1, "boot"), product(2, "sandal"), order])
    store.commit({})
    store.apply([cdc("t", {}), product(3, "clog")])
    store.commit({})
    assert store.rows("products") == {"3": {"id": 3, "title": "clog", "category": "shoes",
                                            "price": 10.5}}  # fmt: skip
    found = sorted((hit.collection, hit.id) for hit in search(index, "shoes"))
    assert found == [("orders", "1"), ("products", "3")]


def test_a_primary_key_change_moves_the_row(store: SearchStore, index: Path) -> None:
    store.apply([product(1, "moving box")])
    store.commit({})
    # Debezium writes a key change as a delete of the old key (and its tombstone), then a
    # create under the new one.
    store.apply([cdc("d", {"id": 1}), tombstone({"id": 1}), product(9, "moving box")])
    store.commit({})
    assert ids(index, "moving") == ["9"]
    assert list(store.rows("products")) == ["9"]


def test_an_unchanged_toast_value_keeps_the_value_the_row_had(
    store: SearchStore, index: Path
) -> None:
    store.apply([product(1, "lamp", description="a very long brass description")])
    store.commit({})
    toasted = {"id": 1, "title": "desk lamp", "category": "lights", "price": 10.5,
               "description": UNAVAILABLE_VALUE}  # fmt: skip
    store.apply([cdc("u", {"id": 1}, toasted)])
    store.commit({})
    assert store.rows("products")["1"]["description"] == "a very long brass description"
    assert ids(index, "description:brass") == ["1"]
    assert ids(index, "desk") == ["1"]
    assert ids(index, UNAVAILABLE_VALUE) == []


def test_a_toast_value_comes_from_the_batch_and_not_from_before_a_truncate(
    store: SearchStore,
) -> None:
    store.apply([product(1, "old", description="committed"), product(2, "x", description="old")])
    store.commit({})
    toasted = {"id": 1, "title": "new", "description": UNAVAILABLE_VALUE}
    store.apply([product(1, "mid", description="in the batch"), cdc("u", {"id": 1}, toasted)])
    store.apply([cdc("t", {}), cdc("u", {"id": 2}, {"id": 2, "description": UNAVAILABLE_VALUE})])
    store.apply([cdc("u", {"id": 1}, toasted)])
    store.commit({})
    assert store.rows("products") == {"2": {"id": 2}, "1": {"id": 1, "title": "new"}}


def test_positions_survive_a_reopen_and_a_later_commit_adds_to_them(index: Path) -> None:
    store = SearchStore(index)
    store.open()
    assert store.positions() == {}
    store.apply([product(1, "boot")])
    store.commit({(PRODUCTS, 0): 1, (PRODUCTS, 1): 7})
    store.close()
    store.open()
    assert store.positions() == {(PRODUCTS, 0): 1, (PRODUCTS, 1): 7}
    store.commit({(PRODUCTS, 1): 9, (ORDERS, 0): 3})  # a batch from some partitions only
    store.close()
    store.open()
    assert store.positions() == {(PRODUCTS, 0): 1, (PRODUCTS, 1): 9, (ORDERS, 0): 3}
    assert ids(index, "*") == ["1"]  # the positions are no row
    store.close()


def test_a_batch_not_committed_is_gone_after_a_reopen(index: Path) -> None:
    store = SearchStore(index)
    store.open()
    store.apply([product(1, "committed")])
    store.commit({(PRODUCTS, 0): 1})
    store.apply([product(2, "lost"), cdc("d", {"id": 1}), cdc("t", {}, topic=ORDERS)])
    assert ids(index, "lost") == []  # nothing is visible before the commit
    store.close()  # the sink dies before its commit
    store.open()
    assert store.positions() == {(PRODUCTS, 0): 1}
    assert list(store.rows("products")) == ["1"]
    store.close()
    assert ids(index, "lost") == []
    assert ids(index, "committed") == ["1"]


def test_search_returns_the_best_hits_first_up_to_the_limit(
    store: SearchStore, index: Path
) -> None:
    store.apply([product(1, "red hat", "hats"), product(2, "red red red shoe", "red"),
                 product(3, "blue shoe"), product(4, "red scarf")])  # fmt: skip
    store.commit({})
    hits = search(index, "red", limit=2)
    assert [hit.id for hit in hits] == ["2", hits[1].id]
    assert hits[0].score > hits[1].score
    everything = search(index, "red")
    assert [hit.id for hit in everything][:2] == [hit.id for hit in hits]
    assert sorted(hit.id for hit in everything) == ["1", "2", "4"]
    assert [hit.score for hit in everything] == sorted((h.score for h in everything), reverse=True)
    assert sorted(ids(index, "title:shoe")) == ["2", "3"]
    assert ids(index, "title:shoe AND category:red") == ["2"]
    assert ids(index, "title:hats") == []  # a word of another column
    assert ids(index, "row.category:hats") == ["1"]
    assert ids(index, '"red scarf"') == ["4"]
    assert ids(index, "collection:products AND -red") == ["3"]
    with pytest.raises(SinkError, match="limit"):
        search(index, "red", limit=0)


def test_a_query_that_does_not_parse_is_a_sink_error(store: SearchStore, index: Path) -> None:
    store.commit({})
    with pytest.raises(SearchQueryError, match=r"title:\(shoe.*Syntax Error") as raised:
        search(index, "title:(shoe")
    assert isinstance(raised.value, SinkError)
    assert "\n" not in str(raised.value)


def test_search_where_there_is_no_index_is_a_sink_error(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match=r"no search index at .*does not exist"):
        search(tmp_path / "missing", "shoe")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SinkError, match=r"no search index at .*holds no Tantivy index"):
        search(tmp_path / "empty", "shoe")
    assert list((tmp_path / "empty").iterdir()) == []  # searching creates nothing


def test_search_and_a_read_only_store_run_beside_the_writer(
    store: SearchStore, index: Path
) -> None:
    store.apply([product(1, "boot")])
    store.commit({(PRODUCTS, 0): 1})
    store.apply([product(2, "boot")])
    reader = SearchStore(index, read_only=True)
    reader.open()
    assert reader.positions() == {(PRODUCTS, 0): 1}
    assert list(reader.rows("products")) == ["1"]
    assert reader.rows("nothing") == {}
    with pytest.raises(SinkError, match="read-only"):
        reader.apply([product(3, "boot")])
    reader.close()
    assert ids(index, "boot") == ["1"]  # the last commit
    store.commit({})
    assert sorted(ids(index, "boot")) == ["1", "2"]


def test_a_second_writer_is_refused_while_the_first_is_open(index: Path) -> None:
    first = SearchStore(index)
    first.open()
    second = SearchStore(index)
    with pytest.raises(SinkError, match="in use by another writer"):
        second.open()
    first.close()
    second.open()
    second.close()


def test_directories_that_are_no_search_index_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("someone's files")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "meta.json").write_text("garbage")
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=True)
    tantivy.Index(builder.build(), path=str(tmp_path))  # someone else's Tantivy index
    cases = {
        tmp_path / "a-file" / "index": "cannot create the search index directory",
        tmp_path / "a-file": "not a directory",
        tmp_path / "other": "holds no Tantivy index",
        tmp_path / "corrupt": "Data corrupted",
        tmp_path: "not a riverbed search index",
    }
    for directory, message in cases.items():
        with pytest.raises(SinkError, match=message) as raised:
            SearchStore(directory).open()
        assert "\n" not in str(raised.value)
    assert [p.name for p in (tmp_path / "other").iterdir()] == ["notes.txt"]


def test_a_store_that_is_not_open_says_so(index: Path) -> None:
    with pytest.raises(SinkError, match="not open"):
        SearchStore(index).positions()
    SearchStore(index).close()  # closing twice, or never opened, is harmless
