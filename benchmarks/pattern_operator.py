"""The Python cost of the ``fraud_alerts`` operator alone, without Spark.

    .venv/bin/python benchmarks/pattern_operator.py [--payments 1000000] [--batch 100000]
        [--repeat 3] [--profile] [--cache FILE]

``benchmarks/pipelines_joins.py --only fraud_alerts`` measures the whole pipeline; its
Python workers spend most of their CPU in riverbed's own operator, not in PySpark
(BENCHMARKS.md). This runs that operator, ``PatternMatches`` as ``fraud_alerts`` builds it,
through the calls Spark would make, in one process and with the in-memory states of
``riverbed.testing.memory_states``, so that a change to it can be measured in a minute
instead of a Spark run, and profiled (``--profile``: cProfile, the top functions).

The payments are those of ``pipelines_joins.py``'s workload (the same seed), in arrival
order, cut into micro-batches of ``--batch``. Making them takes about 4 minutes for
1,000,000 (the workload makes the whole clickstream); ``--cache FILE`` keeps them in
``FILE`` (JSON lines) and reads them from there next time. Each batch's watermark is
Spark's: the latest ``ts`` of the batches before, less 2 minutes. In a batch, each bucket's
input is handed to ``handleInputRows`` (its events as the JSON that ``match_pattern`` makes
in the JVM), then the timers the watermark has reached fire, bucket by bucket. The bucket is
a CRC-32 of the card modulo 64 (Spark's xxHash64 is in the JVM): the same spread. Reported:
CPU µs per payment (the process's CPU time in the operator's calls, the input frames made
before the clock starts), the state's size at the end, and the alerts, each checked against
``riverbed.testing.references.fraud_alerts`` (a run ends before its last alerts are due, so
they are checked as a subset, and counted). Not part of the test run; results go in
BENCHMARKS.md.
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

from _common import measure_operator, operator_arguments
from pipelines_joins import SHOP, FraudAlertsInputs, generate

from riverbed.pipelines.operators.buckets import BUCKETS
from riverbed.pipelines.operators.pattern_matches import EVENT, KEY
from riverbed.pipelines.shop.contract import PAYMENT, WATERMARK_DELAY
from riverbed.pipelines.shop.fraud_alerts import alerts_processor
from riverbed.testing.memory_states import OperatorRun
from riverbed.testing.references import fraud_alerts
from riverbed.testing.topic_reader import last_values, repeated_keys

Batch = tuple[int, dict[int, pd.DataFrame]]
"""A micro-batch: its watermark, and each bucket's input frame."""


def delay_ms() -> int:
    """The pipeline's watermark delay ("2 minutes") in ms."""
    amount, unit = WATERMARK_DELAY.split()
    assert unit.startswith("minute"), WATERMARK_DELAY
    return int(amount) * 60_000


def batches(payments: list[dict[str, Any]], size: int) -> list[Batch]:
    fields = PAYMENT.fieldNames()
    out: list[Batch] = []
    latest: int | None = None
    for start in range(0, len(payments), size):
        watermark = 0 if latest is None else max(0, latest - delay_ms())
        by_bucket: dict[int, list[tuple[str, str]]] = {}
        for p in payments[start : start + size]:
            bucket = zlib.crc32(p["card_id"].encode()) % BUCKETS
            event = json.dumps({f: p.get(f) for f in fields}, separators=(",", ":"))
            by_bucket.setdefault(bucket, []).append((p["card_id"], event))
            latest = p["ts"] if latest is None else max(latest, p["ts"])
        frames = {b: pd.DataFrame(rows, columns=[KEY, EVENT]) for b, rows in by_bucket.items()}
        out.append((watermark, frames))
    return out


def new_run() -> OperatorRun:
    return OperatorRun(alerts_processor)


def check(run: OperatorRun, payments: list[dict[str, Any]]) -> str:
    late = {json.loads(k)["payment_id"] for t, k, _ in run.outputs if t == "fraud_alerts_late"}
    records = [(k, v) for t, k, v in run.outputs if t == "fraud_alerts"]
    repeated = repeated_keys(records)  # early alerts, then corrections: none written twice
    written = [json.loads(v) for v in last_values(records).values()]
    expected = {
        (a["card_id"], a["payment_id"]): a
        for a in fraud_alerts(p for p in payments if p["payment_id"] not in late)
    }
    wrong = [a for a in written if expected.get((a["card_id"], a["payment_id"])) != a]
    if wrong or repeated:
        raise SystemExit(f"wrong or repeated alerts, e.g. {wrong[:3]} {repeated[:3]}")
    return (
        f"{len(written):,} alerts, each the reference's (which has {len(expected):,} in all), "
        f"in {len(records):,} records (early alerts and corrections); {len(late):,} late payments"
    )


def made_payments(count: int, cache: Path | None) -> list[dict[str, Any]]:
    """The workload's first ``count`` payments, read from ``cache`` if it holds as many."""
    if cache is not None and cache.exists():
        with cache.open() as lines:
            payments = [json.loads(line) for _, line in zip(range(count), lines, strict=False)]
        if len(payments) == count:
            return payments
    inputs = generate(SHOP, ["fraud_alerts"], count)["fraud_alerts"]
    assert isinstance(inputs, FraudAlertsInputs)
    if cache is not None:
        cache.write_text("".join(json.dumps(p) + "\n" for p in inputs.payments))
    return inputs.payments


def main() -> None:
    args = operator_arguments(__doc__, "payments", cache=True)
    started = time.perf_counter()
    payments = made_payments(args.payments, args.cache)
    work = batches(payments, args.batch)
    print(f"{len(payments):,} payments in {len(work)} batches, made in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    measure_operator(
        args, new_run, work, len(payments), "payment", lambda run: check(run, payments)
    )


if __name__ == "__main__":
    main()
