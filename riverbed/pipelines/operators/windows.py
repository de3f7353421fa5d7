"""Event-time windows and lateness: the pure logic of the windowed operators.

Times are integers, milliseconds since the epoch; windows are half-open ``[start, end)``.
Nothing here knows Spark: :mod:`riverbed.pipelines.operators.windowed_counts` calls these
functions from its stateful processor, and the tests call them directly.

- **Tumbling and hopping windows.** A window of ``size`` every ``slide`` (tumbling when
  ``slide == size``) starts at the multiples of ``slide``; an event belongs to every window
  ``[start, start + size)`` that contains its time (``size / slide`` of them).
- **Panes.** The slide-aligned intervals ``[k * slide, (k + 1) * slide)``: every event of
  a pane belongs to the same windows, so events can be counted per pane before the shuffle
  and the counts added to windows afterwards (:func:`pane_start`).
- **Lateness.** A window is complete, and its result final, once the watermark has reached
  its end: the operator emits it then. An event that arrives for a window whose end is at
  or below the watermark is *late*: it can no longer be counted, so it goes to the late
  side output with the reason, instead of being dropped without a trace as Spark does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

__all__ = [
    "counts_by_window",
    "late_reason",
    "pane_start",
    "window_starts",
    "windows_of",
]

Int64Array = npt.NDArray[np.int64]


def _check(size_ms: int, slide_ms: int) -> None:
    if size_ms <= 0 or slide_ms <= 0 or size_ms % slide_ms:
        raise ValueError(f"a window of {size_ms} ms every {slide_ms} ms: size must be a "
                         "positive multiple of the slide")  # fmt: skip


def windows_of(ts: int, size_ms: int, slide_ms: int) -> list[tuple[int, int]]:
    """The windows ``[start, end)`` that contain ``ts``, earliest first."""
    _check(size_ms, slide_ms)
    last = ts - ts % slide_ms
    return [
        (start, start + size_ms) for start in range(last - size_ms + slide_ms, last + 1, slide_ms)
    ]


def pane_start(ts: Int64Array, slide_ms: int) -> Int64Array:
    """The start of the pane (module docstring) of each event time."""
    return ts - np.mod(ts, slide_ms)


def window_starts(ts: Int64Array, size_ms: int, slide_ms: int) -> tuple[Int64Array, Int64Array]:
    """Vectorised :func:`windows_of`: (row index, window start) for every (event, window)
    pair, earliest window first per event."""
    _check(size_ms, slide_ms)
    per_event = size_ms // slide_ms
    last = pane_start(ts, slide_ms)
    rows = np.repeat(np.arange(len(ts), dtype=np.int64), per_event)
    offsets = np.tile(np.arange(per_event - 1, -1, -1, dtype=np.int64) * slide_ms, len(ts))
    return rows, np.repeat(last, per_event) - offsets


def late_reason(window_start: int, window_end: int, watermark_ms: int) -> str:
    """Why an event for ``[window_start, window_end)`` is late (``window_end <=
    watermark_ms``): the ``reason`` of a late event."""
    return (
        f"too late: window [{window_start}, {window_end}) was already complete "
        f"(watermark {watermark_ms})"
    )


def counts_by_window(
    ts: Int64Array,
    size_ms: int,
    slide_ms: int,
    watermark_ms: int,
    weights: Int64Array | None = None,
) -> tuple[Mapping[int, int], Int64Array, Int64Array]:
    """For a batch of event times: the count per open window start, and the (row, window
    start) pairs that are late. With ``weights``, row ``i`` stands for ``weights[i]`` events
    at ``ts[i]`` (a pane of pre-counted events: every event of a pane has the same windows)."""
    rows, starts = window_starts(ts, size_ms, slide_ms)
    late = starts + size_ms <= watermark_ms
    on_time = starts[~late]
    values, inverse = np.unique(on_time, return_inverse=True)
    row_weights = None if weights is None else weights[rows[~late]]
    counts = np.bincount(inverse, weights=row_weights, minlength=len(values)).astype(np.int64)
    return dict(zip(values.tolist(), counts.tolist(), strict=True)), rows[late], starts[late]
