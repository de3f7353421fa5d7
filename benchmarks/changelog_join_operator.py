"""The Python cost of ``category_sales``' three operators alone, without Spark.

    .venv/bin/python benchmarks/changelog_join_operator.py [--records 1000000]
        [--batch 100000] [--repeat 3] [--profile]

``benchmarks/pipelines_joins.py --only category_sales`` measures the whole pipeline. This
runs its operators, the three stages of :mod:`riverbed.pipelines.operators.changelog_join`
as ``category_sales`` builds them, through the calls Spark would make, in one process and
with the in-memory states of ``riverbed.testing.memory_states``, so that a change to them
can be measured in a minute instead of a Spark run, and profiled (``--profile``: cProfile,
the top functions).

The change records are those of ``pipelines_joins.py``'s workload (the same seed; making
1,000,000 takes about a minute), in arrival order, each in one of 4 partitions by a CRC-32
of its key (Kafka's clients use murmur2: the same spread), cut into micro-batches of
``--batch``. In a batch, stage 0 (``RouteLeftRows``) gets each bucket's order changes;
stage 1 (``JoinKeyStage``) each bucket's product changes and stage 0's rows for it (a
bucket is a CRC-32 of the key modulo 64, where Spark uses xxHash64); stage 2
(``GroupStage``) each category's contributions. Reported: CPU µs per record for each stage
(the frames between stages made outside the clock), the states' text at the end, and the
categories, checked against the workload's final tables (``CategorySalesInputs.reference``).
Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import operator_arguments, print_profile, print_spread
from pipelines_joins import SHOP, CategorySalesInputs, Record, generate

from riverbed.pipelines.operators.buckets import BUCKETS
from riverbed.pipelines.operators.changelog_join import GroupStage, JoinKeyStage, RouteLeftRows
from riverbed.pipelines.shop.category_sales import CATEGORY_SALES, ORDERS, TOPIC
from riverbed.testing.memory_states import MemoryHandle, Watermark, map_state_bytes

PARTITIONS = 4
CHANGE_COLUMNS = ["key", "value", "partition", "offset"]
STAGE1_COLUMNS = ["join_key", *CHANGE_COLUMNS, "join_key_json", "left_key", "left_row"]


def bucket_of(text: str) -> int:
    return zlib.crc32(text.encode()) % BUCKETS


Batch = tuple[dict[int, pd.DataFrame], dict[int, list[tuple[Any, ...]]]]
"""A micro-batch: stage 0's frame per bucket, and the product changes per stage 1 bucket."""


def batches(records: list[Record], size: int) -> list[Batch]:
    offsets: dict[tuple[str, int], int] = {}
    out: list[Batch] = []
    for start in range(0, len(records), size):
        orders: dict[int, list[tuple[Any, ...]]] = {}
        products: dict[int, list[tuple[Any, ...]]] = {}
        for topic, key, value in records[start : start + size]:
            partition = zlib.crc32(key) % PARTITIONS
            offset = offsets[topic, partition] = offsets.get((topic, partition), -1) + 1
            key_text = key.decode()
            change = (key_text, None if value is None else value.decode(), partition, offset)
            if topic == ORDERS:
                order_id = json.loads(key_text)["order_id"]
                orders.setdefault(bucket_of(str(order_id)), []).append((order_id, *change))
            else:
                product_id = json.loads(key_text)["product_id"]
                row = (product_id, *change, None, None, None)
                products.setdefault(bucket_of(str(product_id)), []).append(row)
        frames = {
            b: pd.DataFrame(rows, columns=["order_id", *CHANGE_COLUMNS])
            for b, rows in orders.items()
        }
        out.append((frames, products))
    return out


class Stage:
    """One operator as each Python worker would hold it: a processor and an in-memory
    state per grouping key."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.processors: dict[Any, Any] = {}
        self.handles: dict[Any, MemoryHandle] = {}
        self.cpu = 0.0

    def __call__(self, key: Any, frame: pd.DataFrame) -> list[pd.DataFrame]:
        started = time.process_time()
        if key not in self.processors:
            processor, handle = self.make(), MemoryHandle()
            processor.init(handle)
            self.processors[key], self.handles[key] = processor, handle
        out = list(self.processors[key].handleInputRows((key,), iter([frame]), Watermark()))
        self.cpu += time.process_time() - started
        return out

    def state_bytes(self) -> int:
        return map_state_bytes(self.handles.values())


class Run:
    def __init__(self) -> None:
        self.stages = (
            Stage(lambda: RouteLeftRows(CATEGORY_SALES)),
            Stage(lambda: JoinKeyStage(CATEGORY_SALES)),
            Stage(lambda: GroupStage(CATEGORY_SALES, topic=TOPIC)),
        )
        self.outputs: dict[str, str | None] = {}

    def __call__(self, work: list[Batch]) -> None:
        route, join, group = self.stages
        for frames, products in work:
            stage1 = {b: list(rows) for b, rows in products.items()}
            for bucket, frame in frames.items():
                for out in route(bucket, frame):
                    for join_key_json, left_key, left_row in out.itertuples(index=False):
                        join_key = json.loads(join_key_json)
                        routing = join_key if isinstance(join_key, str) else join_key_json
                        row = (routing, None, None, None, None, join_key_json, left_key, left_row)
                        stage1.setdefault(bucket_of(routing), []).append(row)
            by_group: dict[str, list[pd.DataFrame]] = {}
            for bucket, rows in stage1.items():
                for out in join(bucket, pd.DataFrame(rows, columns=STAGE1_COLUMNS)):
                    for group_json, frame in out.groupby("group_json"):
                        by_group.setdefault(str(group_json), []).append(frame)
            for group_json, parts in by_group.items():
                frame = pd.concat(parts, ignore_index=True)
                for out in group(group_json, frame):
                    for _, key, value in out.itertuples(index=False):
                        self.outputs[key] = value


def check(run: Run, inputs: CategorySalesInputs) -> str:
    got = {
        json.loads(key)["category"]: json.loads(value)
        for key, value in run.outputs.items()
        if value is not None
    }
    expected = inputs.reference()
    if got != expected:
        wrong = [c for c in got.keys() | expected.keys() if got.get(c) != expected.get(c)]
        raise SystemExit(f"categories differ from the reference: {sorted(wrong)[:5]}")
    return f"{len(got)} categories equal the reference"


def main() -> None:
    args = operator_arguments(__doc__, "records", cache=False)
    started = time.perf_counter()
    inputs = generate(SHOP, ["category_sales"], args.records)["category_sales"]
    assert isinstance(inputs, CategorySalesInputs)
    work = batches(inputs.records, args.batch)
    print(f"{len(inputs.records):,} change records in {len(work)} batches, made in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    if args.profile:
        print_profile(lambda: Run()(work))
        return
    totals = []
    for i in range(args.repeat):
        run = Run()
        run(work)
        per_stage = [stage.cpu / len(inputs.records) * 1e6 for stage in run.stages]
        totals.append(sum(per_stage))
        states = [stage.state_bytes() / 2**20 for stage in run.stages]
        print(f"run {i + 1}: {sum(per_stage):.1f} CPU-µs a record (stages "
              f"{', '.join(f'{x:.1f}' for x in per_stage)}), state text at the end "
              f"{', '.join(f'{x:.1f}' for x in states)} MiB, {check(run, inputs)}")  # fmt: skip
    print_spread(totals, "CPU-µs a record")


if __name__ == "__main__":
    main()
