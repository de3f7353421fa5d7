"""``json_events``, the operators' parse of a topic's JSON events: its rows, and one parse
per record however the caller filters them (Spark's optimizer pushes a filter on a parsed
field below a projection, parsing again for each condition), and the Python-side parse
(``json_arrow``) giving what it gives."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from riverbed.pipelines.operators.inputs import json_events
from riverbed.pipelines.operators.json_arrow import arrow_schema, parse_json_objects, parse_one
from riverbed.pipelines.shop.contract import PAGE_VIEW, PAYMENT

VALUES: list[bytes | None] = [
    b'{"payment_id": "p1", "card_id": "c1", "status": "declined", "ts": 5}',
    b"not json",
    b"[]",
    None,  # a tombstone
    b'{"payment_id": "p2", "ts": "soon"}',
    b'{"payment_id": "p3", "card_id": "c2", "status": "approved", "ts": 7, "extra": 1}',
]


def _source(spark: SparkSession) -> DataFrame:
    rows = [(value, "payments") for value in VALUES] + [(VALUES[0], "other")]
    return spark.createDataFrame(rows, "value binary, topic string")


def test_one_row_per_record_of_the_topic_nulls_where_not_an_object(spark: SparkSession) -> None:
    events = json_events(_source(spark), "payments", PAYMENT)
    assert events.columns == PAYMENT.fieldNames()
    rows = [row.asDict() for row in events.collect()]
    assert len(rows) == len(VALUES)  # the other topic's record is not there
    by_id = {row["payment_id"]: row for row in rows}
    assert by_id["p1"] == {
        "payment_id": "p1", "card_id": "c1", "user_id": None, "amount_cents": None,
        "status": "declined", "ts": 5,
    }  # fmt: skip
    assert by_id["p3"]["ts"] == 7 and by_id["p3"]["status"] == "approved"
    assert by_id["p2"]["ts"] is None  # a field of the wrong type is null, as from_json has it
    assert sum(all(v is None for v in row.values()) for row in rows) == 3


def test_a_filter_on_the_fields_does_not_parse_again(spark: SparkSession) -> None:
    events = json_events(_source(spark), "payments", PAYMENT)
    valid = events.where(
        F.col("card_id").isNotNull() & F.col("ts").isNotNull() & (F.col("status") == "approved")
    )
    plan = valid._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_json(") == 1, plan
    assert [row["payment_id"] for row in valid.collect()] == ["p3"]


# Values a producer may write, valid or not, with from_json's quirks: a number, a boolean
# or an object where a string is expected, floats as Java writes them, text after the
# object, invalid UTF-8, lone surrogates, repeated keys, an unescaped tab.
ODD_VALUES: list[bytes | None] = [
    *VALUES,
    b'{"page": 5, "ts": 1}', b'{"page": "a", "ts": "12"}', b'{"page": "a", "ts": 1.0}',
    b'{"page": true, "ts": 4}', b'{"page": {"a": 1, "b": [1, "x"]}, "ts": 5}',
    b'{"page": 1.50, "ts": 7}', b'{"page": 1e20, "ts": 8}', b'{"page": NaN, "ts": 9}',
    b'{"page": -1e400, "ts": 10}', b'{"page": 12345678901234567890123, "ts": 11}',
    b'{"page": "a", "ts": 12} x', b'{"ts": 13}{"ts": 2}', b'  {"ts": 14}  ',
    b'{"page": "\xff", "ts": 15}', b'{"page": "\\ud800", "ts": 16}', b'{"ts": 1, "ts": 17}',
    b'{"page": "a\tb", "ts": 18}', b'{"page": "a",\n "ts": 19}', b'{"ts": 9223372036854775808}',
    b'{"p\\u0061ge": "e", "ts": 20}', b'{"PAGE": "a", "ts": 21}', b'{"page": "a", "ts": 22,}',
    b'{"page": "\\u00e9\\ud83d\\ude00", "ts": 23}', b"null", b"", b'"x"', b'[{"ts": 24}]',
]  # fmt: skip


def test_the_python_side_parse_gives_what_from_json_gives(spark: SparkSession) -> None:
    rows = [(value, "page_views") for value in ODD_VALUES]
    source = spark.createDataFrame(rows, "value binary, topic string")
    spark_rows = [row.asDict() for row in json_events(source, "page_views", PAGE_VIEW).collect()]
    fields = [(f.name, "long" if f.name == "ts" else "string") for f in PAGE_VIEW.fields]
    ours = parse_json_objects(pa.array(ODD_VALUES, pa.binary()), arrow_schema(fields))
    assert ours.to_pylist() == spark_rows
    assert [parse_one(value, fields) for value in ODD_VALUES] == spark_rows
    # The one difference known: Spark reads single-quoted JSON, json_arrow does not.
    quoted = spark.createDataFrame([(b"{'page': 'a'}", "t")], "value binary, topic string")
    assert json_events(quoted, "t", PAGE_VIEW).first()["page"] == "a"
    assert parse_one(b"{'page': 'a'}", fields)["page"] is None
