"""The Python cost of the ``enriched_clicks`` operator alone, without Spark.

    .venv/bin/python benchmarks/as_of_join_operator.py [--records 1000000]
        [--batch 100000] [--repeat 3] [--profile] [--cache FILE]

``benchmarks/pipelines_joins.py --only enriched_clicks`` measures the whole pipeline. This
runs its operator, ``AsOfJoin`` as ``enriched_clicks`` builds it (``join_processor``),
through the calls Spark would make, in one process and with the in-memory states of
``riverbed.testing.memory_states``, so that a change to it can be measured in a minute
instead of a Spark run, and profiled (``--profile``: cProfile, the top functions).

The records are those of ``pipelines_joins.py``'s workload (the same seed): the users'
snapshot, then the clicks and the users' changes interleaved by event time, ``--records``
in all. Making them takes about 6 minutes for 1,000,000; ``--cache FILE`` keeps them in
``FILE`` (a pickle) and reads them from there next time. As in the pipeline benchmark, the
snapshot is read first (not timed), then the rest in micro-batches of ``--batch``. Each
batch's watermark is Spark's: the latest event time (a click's ``ts``, a change's
``source.ts_ms``) of the batches before, less 2 minutes. In a batch, each bucket's rows are
handed to ``handleInputRows`` as ``as_of_join`` makes them in the JVM, then the timers the
watermark has reached fire, bucket by bucket. The bucket is a CRC-32 of the user modulo 64
(Spark's xxHash64 is in the JVM): the same spread. Reported: CPU µs per timed record (the
process's CPU time in the operator's calls, the input frames made before the clock
starts), the state's text at the end, and the enriched clicks, checked as the pipeline
benchmark checks them (every click once, its profile the plain-Python as-of lookup's). Not
part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import json
import pickle
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import measure_operator, operator_arguments
from pipelines_joins import SHOP, EnrichedClicksInputs, Output, Record, generate

from riverbed.pipelines.operators.as_of_join import (
    CHANGE_KEY,
    CHANGE_VALUE,
    EVENT,
    EVENT_ID,
    EVENT_TS,
    KEY,
)
from riverbed.pipelines.operators.buckets import BUCKETS
from riverbed.pipelines.shop.contract import CLICK, WATERMARK_DELAY
from riverbed.pipelines.shop.enriched_clicks import CLICKS_TOPIC, join_processor
from riverbed.testing.memory_states import OperatorRun

COLUMNS = [KEY, EVENT_ID, EVENT_TS, EVENT, CHANGE_KEY, CHANGE_VALUE]
Batch = tuple[int, dict[int, pd.DataFrame]]
"""A micro-batch: its watermark, and each bucket's input frame."""


def delay_ms() -> int:
    amount, unit = WATERMARK_DELAY.split()
    assert unit.startswith("minute"), WATERMARK_DELAY
    return int(amount) * 60_000


def row_of(record: Record) -> tuple[tuple[Any, ...], int | None]:
    """The operator's input row of a record, as ``as_of_join`` projects it, and its event
    time (None for a tombstone, which the projection leaves out)."""
    topic, key, value = record
    if value is None:
        return (), None
    if topic == CLICKS_TOPIC:
        parsed = json.loads(value)
        click = {f: parsed.get(f) for f in CLICK.fieldNames()}
        event = json.dumps(click, separators=(",", ":"))
        ts = click["ts"]
        return (str(click["user_id"]), str(click["click_id"]), ts, event, None, None), ts
    key_text, text = key.decode(), value.decode()
    ts_ms = json.loads(text)["source"]["ts_ms"]
    return (str(json.loads(key_text)["user_id"]), None, None, None, key_text, text), ts_ms


def batches(records: list[Record], size: int, latest: int | None = None) -> list[Batch]:
    """``records`` in micro-batches of ``size``, the first after a batch whose latest event
    time was ``latest``."""
    out: list[Batch] = []
    for start in range(0, len(records), size):
        watermark = 0 if latest is None else max(0, latest - delay_ms())
        by_bucket: dict[int, list[tuple[Any, ...]]] = {}
        for record in records[start : start + size]:
            row, ts = row_of(record)
            if ts is None:
                continue
            by_bucket.setdefault(zlib.crc32(row[0].encode()) % BUCKETS, []).append(row)
            latest = ts if latest is None else max(latest, ts)
        frames = {b: pd.DataFrame(rows, columns=COLUMNS) for b, rows in by_bucket.items()}
        out.append((watermark, frames))
    return out


def latest_ts(work: list[Batch]) -> int | None:
    """The latest event time of ``work``'s rows."""
    times = [
        int(t)
        for _, frames in work
        for frame in frames.values()
        for t in frame[EVENT_TS].dropna().tolist()
    ]
    changes = [
        json.loads(text)["source"]["ts_ms"]
        for _, frames in work
        for frame in frames.values()
        for text in frame[CHANGE_VALUE].dropna().tolist()
    ]
    return max(times + changes, default=None)


def made_inputs(count: int, cache: Path | None) -> EnrichedClicksInputs:
    """The workload's first ``count`` records, read from ``cache`` if it holds as many."""
    if cache is not None and cache.exists():
        with cache.open("rb") as f:
            inputs = pickle.load(f)
        if len(inputs.preload) + len(inputs.records) >= count:
            return inputs  # type: ignore[no-any-return]
    made = generate(SHOP, ["enriched_clicks"], count)["enriched_clicks"]
    assert isinstance(made, EnrichedClicksInputs)
    inputs = EnrichedClicksInputs.__new__(EnrichedClicksInputs)  # without its generators
    inputs.size, inputs.config, inputs.name = made.size, made.config, made.name
    inputs.preload, inputs.records = made.preload, made.records
    inputs.clicks, inputs.versions = made.clicks, made.versions
    if cache is not None:
        with cache.open("wb") as f:
            pickle.dump(inputs, f)
    return inputs


def check(run: OperatorRun, inputs: EnrichedClicksInputs) -> str:
    outputs: dict[str, Output] = {}
    for topic, key, value in run.outputs:
        outputs.setdefault(topic, []).append((key.encode(), value.encode()))
    return inputs.check(outputs, 0)


def main() -> None:
    args = operator_arguments(__doc__, "records", cache=True)
    started = time.perf_counter()
    inputs = made_inputs(args.records, args.cache)
    preload = batches(inputs.preload, args.batch)
    work = batches(inputs.records, args.batch, latest_ts(preload))
    print(f"{len(inputs.preload):,} snapshot rows, then {len(inputs.records):,} records in "
          f"{len(work)} batches, made in {time.perf_counter() - started:.1f} s")  # fmt: skip

    def loaded() -> OperatorRun:
        """A run with the snapshot read (not timed)."""
        run = OperatorRun(join_processor)
        run(preload)
        return run

    measure_operator(
        args, loaded, work, len(inputs.records), "record", lambda run: check(run, inputs)
    )


if __name__ == "__main__":
    main()
