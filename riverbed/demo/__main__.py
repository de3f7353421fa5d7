"""``python -m riverbed.demo``, what ``make demo`` runs: its flags, then
:func:`riverbed.demo.run`."""

from __future__ import annotations

import argparse
from pathlib import Path

from riverbed.demo.tour import run


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m riverbed.demo", description="riverbed end to end on one machine"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("data/demo"),
        help="the broker's data directory, emptied first and kept afterwards (default data/demo)",
    )
    parser.add_argument(
        "--events",
        type=_positive_int,
        default=200_000,
        help="click events of the broker and Spark sections (default 200,000)",
    )
    parser.add_argument(
        "--shop-seconds",
        type=_positive_seconds,
        default=20.0,
        help="how long the shop runs in real time in the CDC section (default 20)",
    )
    args = parser.parse_args()
    run(args.data_dir, count=args.events, shop_seconds=args.shop_seconds)


if __name__ == "__main__":
    main()
