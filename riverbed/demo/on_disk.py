"""The demo's last section: the broker's files, in Kafka's layout."""

from __future__ import annotations

from pathlib import Path

__all__ = ["INTERNAL_TOPICS", "show_data_dir"]

INTERNAL_TOPICS = {
    "__consumer_offsets": "committed offsets",
    "__transaction_state": "transaction coordinator state",
}


def show_data_dir(data_dir: Path) -> None:
    """The broker's files, with the 50 partitions of each internal topic summed up."""
    internal: dict[str, list[Path]] = {name: [] for name in INTERNAL_TOPICS}
    for path in sorted(data_dir.iterdir()):
        topic = path.name.rsplit("-", 1)[0]
        if path.is_dir() and topic in internal:
            internal[topic].append(path)
        elif path.is_dir():
            names = ", ".join(f"{f.name} ({f.stat().st_size:,} B)" for f in sorted(path.iterdir()))
            print(f"  {path.name}/: {names}")
        else:
            print(f"  {path.name} ({path.stat().st_size:,} B)")
    for topic, directories in internal.items():
        if directories:
            stored = sum(f.stat().st_size for d in directories for f in d.glob("*.log"))
            print(
                f"  {topic}-0..{len(directories) - 1}/: {INTERNAL_TOPICS[topic]}, "
                f"{stored:,} B of record batches in all"
            )
