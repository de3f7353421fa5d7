"""Reusable stream operators on PySpark's stateful streaming (``transformWithStateInPandas``):
what a user builds a pipeline from. Each takes DataFrames from the riverbed source and
gives rows for the riverbed sink (``topic``, ``key``, ``value``: :data:`OUTPUT_SCHEMA`), so
that results and side outputs are written in the same transaction, exactly once; the
interval join gives rows of the caller's schema, for a next stage or the sink.

One module per operator (its pure logic, which knows nothing of Spark and which the tests
call directly, in the module after the arrow):

- ``windowed_counts``: counts per key and tumbling or hopping window, with the late side
  output and the panes counted before the shuffle (-> ``windows``);
- ``interval_join``: the stream-stream interval join (-> ``intervals``);
- ``as_of_join``: the stream-table as-of join, corrected by late changes
  (-> ``versioned_row``);
- ``changelog_join``: an aggregate kept over the inner join of two changelogs
  (-> ``join_stages``);
- ``pattern_matches``: complex event processing, patterns per key in event-time order
  (-> ``cep``);

and what they share: :mod:`~riverbed.pipelines.operators.inputs` (events and CDC changes
from the source, the watermark), :mod:`~riverbed.pipelines.operators.changelog` (CDC
records parsed and applied, pure), :mod:`~riverbed.pipelines.operators.buckets` (many keys'
states per group), :mod:`~riverbed.pipelines.operators.base` (the processor skeleton, for
an operator of one's own) and :mod:`~riverbed.pipelines.operators.json_rows` (JSON rows, pure).
"""

from riverbed.pipelines.operators.as_of_join import AsOfJoin, as_of_join
from riverbed.pipelines.operators.base import (
    OUTPUT_SCHEMA,
    KeyedOperator,
    Operator,
    OutputRows,
    by_bucket,
)
from riverbed.pipelines.operators.buckets import KeyedStates, bucket_of
from riverbed.pipelines.operators.cep import (
    Contiguity,
    Match,
    Pattern,
    Step,
    at_least,
    between,
    times,
)
from riverbed.pipelines.operators.changelog import Change, MalformedChange, Op, parse_change
from riverbed.pipelines.operators.changelog_join import join_aggregate
from riverbed.pipelines.operators.inputs import changes, json_events, with_event_time
from riverbed.pipelines.operators.interval_join import (
    LEFT,
    RIGHT,
    SIDE,
    IntervalJoin,
    interval_join,
)
from riverbed.pipelines.operators.intervals import Joined, JoinInterval, LeftRow, RightRow
from riverbed.pipelines.operators.join_stages import JoinSpec
from riverbed.pipelines.operators.json_rows import Json, Row, dumps
from riverbed.pipelines.operators.pattern_matches import PatternMatches, match_pattern
from riverbed.pipelines.operators.windowed_counts import WindowedCounts, windowed_counts

__all__ = [
    "LEFT",
    "OUTPUT_SCHEMA",
    "RIGHT",
    "SIDE",
    "AsOfJoin",
    "Change",
    "Contiguity",
    "IntervalJoin",
    "JoinInterval",
    "JoinSpec",
    "Joined",
    "Json",
    "KeyedOperator",
    "KeyedStates",
    "LeftRow",
    "MalformedChange",
    "Match",
    "Op",
    "Operator",
    "OutputRows",
    "Pattern",
    "PatternMatches",
    "RightRow",
    "Row",
    "Step",
    "WindowedCounts",
    "as_of_join",
    "at_least",
    "between",
    "bucket_of",
    "by_bucket",
    "changes",
    "dumps",
    "interval_join",
    "join_aggregate",
    "json_events",
    "match_pattern",
    "parse_change",
    "times",
    "windowed_counts",
    "with_event_time",
]
