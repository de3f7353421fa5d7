"""``riverbed pipeline run|list``: the Spark pipelines (riverbed.pipelines).

``run NAME`` runs one pipeline until SIGTERM or Ctrl-C (a clean stop: the micro-batch in
flight finishes or is rolled back, and the next run continues from the checkpoint). Its
progress lines (rows/s, watermark, input lag) go to stderr. ``list`` describes every
pipeline: its inputs, its outputs and what it computes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

from riverbed.cli.arguments import (
    add_command,
    add_command_with_actions,
    add_connection_arguments,
    add_number,
    positive_int,
)
from riverbed.cli.errors import CliError
from riverbed.cli.metrics_endpoint import add_metrics_argument, serving

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "pipeline",
        "run the Spark pipelines (windows, sessions, late data)",
        "Run and describe riverbed's Spark Structured Streaming pipelines.",
    )
    run = add_command(
        actions,
        "run",
        "run one pipeline until stopped (SIGTERM or Ctrl-C)",
        "Run one pipeline until SIGTERM or Ctrl-C. The first run starts from the earliest "
        "offsets; a run with the same checkpoint continues where the last stopped.",
    )
    run.add_argument("name", metavar="NAME", help="the pipeline (see `riverbed pipeline list`)")
    add_connection_arguments(run)
    run.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="Spark's checkpoint directory (default data/checkpoints/NAME)",
    )
    add_number(run, "--trigger-ms", positive_int, 1000, "start a micro-batch every N ms")
    run.add_argument(
        "--max-offsets-per-trigger",
        type=positive_int,
        metavar="N",
        help="read at most N records a micro-batch, spread over the input partitions "
        "(Spark's maxOffsetsPerTrigger; default: all there is). Larger batches process a "
        "backlog faster (BENCHMARKS.md), smaller ones bound a batch's time and memory",
    )
    run.add_argument("--master", help="Spark master (default local[N], N = the machine's cores)")
    add_metrics_argument(
        run, "each micro-batch's progress (duration, rows/s, watermark, input lag, state rows)"
    )
    run.set_defaults(run=_run)
    listing = add_command(actions, "list", "describe every pipeline")
    listing.set_defaults(run=_list)


def _run(args: argparse.Namespace) -> int:
    from riverbed.pipelines.runner import PipelineError, RunConfig, run
    from riverbed.pipelines.shop import PIPELINES

    stop = {"requested": False}

    def request_stop(signum: int, frame: object) -> None:
        stop["requested"] = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    config = RunConfig(
        name=args.name,
        bootstrap=args.bootstrap,
        checkpoint=args.checkpoint or Path("data") / "checkpoints" / args.name,
        trigger_ms=args.trigger_ms,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        master=args.master,
        connect_timeout_s=args.connect_timeout_ms / 1000,
    )
    from riverbed.pipelines.metrics import PipelineMetrics

    def say(line: str) -> None:
        print(f"riverbed pipeline: {line}", file=sys.stderr, flush=True)

    metrics = PipelineMetrics(args.name)
    endpoint = serving(args.metrics, metrics.registry, say)
    try:
        run(
            config,
            pipelines=PIPELINES,
            say=say,
            stopping=lambda: stop["requested"],
            on_progress=metrics.observe,
        )
    except PipelineError as e:
        raise CliError(str(e)) from None
    finally:
        if endpoint is not None:
            endpoint.close()
    return 0


def _list(args: argparse.Namespace) -> int:
    from riverbed.pipelines.shop import PIPELINES

    for pipeline in PIPELINES.values():
        print(pipeline.name)
        print(f"  reads:  {', '.join(pipeline.inputs)}")
        print(f"  writes: {', '.join(pipeline.outputs)}")
        for line in textwrap.wrap(pipeline.description, 76):
            print(f"  {line}")
    return 0
