"""What riverbed's per-key states hold (:class:`riverbed.pipelines.operators.buckets.
KeyedStates`), read from a bucket's map state as Spark's ``TwsTester.peekMapState`` gives it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from riverbed.pipelines.operators.buckets import LAYOUT_SLOT, read_slot
from riverbed.pipelines.operators.json_rows import read_state


def slot_entries(peeked: Mapping[tuple[Any, ...], tuple[Any, ...]]) -> dict[str, list[Any]]:
    """Each key's ``[state, listed time]`` in a bucket's slots (``{(slot,): (text,)}``), the
    entries that name the layout left out (the time None for a key listed nowhere, which a
    slot keeps as ``[state]``)."""
    entries: dict[str, list[Any]] = {}
    for (slot,), (text,) in peeked.items():
        if slot != LAYOUT_SLOT:
            for key, entry in read_slot(text)[0].items():
                entries[key] = read_state(entry) if isinstance(entry, str) else entry
    return {key: [entry[0], entry[1] if len(entry) > 1 else None] for key, entry in entries.items()}
