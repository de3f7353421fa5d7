"""``json_events``, the operators' parse of a topic's JSON events: its rows, and one parse
per record however the caller filters them (Spark's optimizer pushes a filter on a parsed
field below a projection, parsing again for each condition)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from riverbed.pipelines.operators.inputs import json_events
from riverbed.pipelines.shop.contract import PAYMENT

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
