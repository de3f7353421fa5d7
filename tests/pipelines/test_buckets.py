"""Per-key states and timers within a bucket (riverbed.pipelines.operators.buckets), on the
in-memory handle of riverbed.testing.memory_states, which behaves as Spark's map states and
event-time timers do."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators.buckets import LAYOUT_SLOT, KeyedStates, read_slot, round_up
from riverbed.pipelines.operators.json_rows import json_text
from riverbed.testing.memory_states import MemoryHandle, MemoryMapState


def states(handle: MemoryHandle, resolution_ms: int | None = 10, slots: int = 4) -> KeyedStates:
    return KeyedStates(handle, "s", resolution_ms=resolution_ms, slots=slots)  # type: ignore[arg-type]


def test_round_up() -> None:
    assert [round_up(x, 10) for x in (-11, -10, 0, 1, 10, 11)] == [-10, -10, 0, 10, 10, 20]


def test_get_put_remove_across_flushes() -> None:
    handle = MemoryHandle()
    s = states(handle, None)
    assert s.get("a") is None
    s.put("a", {"x": 1})
    s.put("b", [1, "é"])
    assert s.get("a") == {"x": 1}
    s.flush()
    s = states(handle, None)  # another task: what was flushed is there
    assert (s.get("a"), s.get("b")) == ({"x": 1}, [1, "é"])
    s.remove("a")
    s.remove("never")
    s.flush()
    assert states(handle, None).get("a") is None
    with pytest.raises(ValueError, match="no timers"):
        s.put("a", {}, due_ms=5)
    with pytest.raises(ValueError, match="no timers"):
        s.due(5)


def test_a_slot_is_read_and_written_once_per_flush() -> None:
    handle = MemoryHandle()
    s = states(handle, None, slots=3)
    keys = [f"k{i}" for i in range(300)]
    for key in keys:
        assert s.get(key) is None
        s.put(key, key)
    s.flush()
    stored = handle.maps["s"]
    assert len(stored.entries) == 3 + 1  # the slots and the layout entry
    # a new bucket: the first read finds nothing, so the layout entry is read, then the
    # bucket whole (nothing either); then three slots and the layout written, for 300 keys
    assert stored.calls == 3 + 4
    stored.calls = 0
    s.remove("k1")
    for key in keys[2:]:
        assert s.get(key) == key
    s.flush()
    assert stored.calls == 4  # three reads, one write: only k1's slot changed
    for key in keys:  # a slot left empty is removed
        s.remove(key)
    s.flush()
    assert stored.entries == {(LAYOUT_SLOT,): ("#3",)}


def test_a_call_that_reads_many_keys_reads_the_whole_bucket_at_once() -> None:
    handle = MemoryHandle()
    s = states(handle, None, slots=16)
    keys = [f"k{i}" for i in range(40)]
    for key in keys[:30]:
        s.put(key, key.upper())
    s.flush()
    stored = handle.maps["s"]
    stored.calls = 0
    s.expect(3)  # fewer than a quarter of the slots: read slot by slot, as they come
    assert stored.calls == 0
    s.expect(4)
    assert stored.calls == 1  # one iteration of the map
    assert [s.get(key) for key in keys] == [k.upper() for k in keys[:30]] + [None] * 10
    s.put("k35", "K35")  # a slot that held nothing yet
    assert stored.calls == 1  # every slot came with the iteration, empty ones too
    s.expect(40)  # the cache holds them all: nothing more to read
    assert stored.calls == 1
    s.flush()
    assert states(handle, None, slots=16).get("k35") == "K35"


def test_a_sweep_of_many_keys_reads_the_whole_bucket_at_once() -> None:
    handle = MemoryHandle()
    s = states(handle, resolution_ms=10, slots=16)
    for i in range(20):
        s.put(f"k{i}", i, due_ms=5)
    s.flush()
    slots = handle.maps["s"]
    slots.calls = 0
    assert sorted(s.due(10)) == sorted((f"k{i}", i) for i in range(20))
    assert slots.calls == 1  # one iteration, not a read per slot


def test_the_bucket_timer_is_at_the_earliest_listed_time_and_stale_listings_skipped() -> None:
    handle = MemoryHandle()
    s = states(handle)
    for key, due in (("a", 1), ("b", 9), ("c", 11)):
        s.put(key, key, due_ms=due)
    s.flush()
    assert handle.timers == {10}  # a and b under 10, c under 20
    s.put("a", "a2", due_ms=25)  # re-listed: the listing under 10 is stale
    s.remove("b")
    s.put("d", "d", due_ms=-3)  # before the bucket's timer: an earlier one, at 0
    s.flush()
    assert handle.timers == {10, 0}
    assert handle.fire(9) == [0]
    assert s.due(9) == [("d", "d")]  # 0 only: 10 is not reached
    s.remove("d")
    s.flush()
    assert handle.timers == {10}  # already registered: not again
    assert handle.registrations == 2
    handle.fire(25)
    assert s.due(25) == [("c", "c")]  # b was removed; a waits for 30 now
    s.put("c", "c2", due_ms=40)
    s.flush()
    assert handle.timers == {30}  # the earliest time still listed: a's
    assert s.due(25) == []  # a later timer of the same batch finds nothing more
    s.flush()
    assert handle.timers == {30}
    handle.fire(40)
    assert sorted(s.due(40)) == [("a", "a2"), ("c", "c2")]
    s.remove("a")
    s.remove("c")
    s.flush()
    assert handle.timers == set() and handle.values["s_timer"].value is None


@given(
    ops=st.lists(
        st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), st.integers(0, 200))),
        min_size=1,
        max_size=60,
    ),
    step=st.integers(1, 40),
    resolution=st.sampled_from([1, 7, 10, 50]),
    early=st.booleans(),
)
def test_every_key_is_handled_once_its_rounded_expiry_is_reached_never_before(
    ops: list[tuple[str, int | None]], step: int, resolution: int, early: bool
) -> None:
    """Keys are updated with new expiries (None: removed) while the watermark advances by
    ``step`` per batch; each batch's timers fire after its updates, as in Spark (``early``:
    the keys due are swept with the updates, ``due_now``, and the timers that fire after
    find what is left). A handled key is put back without expiry. After each batch, no key
    whose expiry rounded up the watermark has reached is left unhandled, and none was
    handled before that."""
    handle = MemoryHandle()
    s = states(handle, resolution, slots=2)
    expiry: dict[str, int] = {}  # the model: keys waiting, and their expiry

    def handle_due(due: list[tuple[str, Any]]) -> None:
        for handled, text in due:
            assert text == f"{handled}@{expiry[handled]}"
            assert round_up(expiry[handled], resolution) <= watermark
            s.put(handled, "done")
            del expiry[handled]

    watermark = 0
    for i, (key, due) in enumerate(ops):
        if early:  # the updates are this batch's input
            watermark += step
        if due is None:
            s.remove(key)
            expiry.pop(key, None)
        else:
            due = max(due, watermark + 1) if i % 3 else due  # some already past
            s.put(key, f"{key}@{due}", due_ms=due)
            expiry[key] = due
        if early:
            handle_due(s.due_now(watermark))
        s.flush()
        if not early:
            watermark += step
        for _ in handle.fire(watermark):
            handle_due(s.due(watermark))
            s.flush()
        assert all(round_up(e, resolution) > watermark for e in expiry.values())
        if expiry:  # a timer at or before the earliest time a key waits for
            assert min(handle.timers) <= min(round_up(e, resolution) for e in expiry.values())


def test_listed_times_share_pages_so_a_sweep_costs_a_few_state_calls() -> None:
    handle = MemoryHandle()
    s = states(handle, resolution_ms=1_000)
    for t in range(200):  # 200 keys, each listed at a second of its own: 4 pages of a minute
        s.put(f"k{t}", t, due_ms=t * 1_000)
    s.flush()
    due = handle.maps["s_due"]
    assert len(due.entries) == 4 and due.calls == 8  # each page read and written once
    due.calls = 0
    handle.fire(150_000)
    assert sorted(state for _, state in s.due(150_000)) == list(range(151))
    s.flush()
    assert due.calls == 1 + 3 * 2  # the keys, then three pages read and written or removed
    assert handle.timers == {151_000}
    assert sorted(due.entries) == [(120_000,), (180_000,)]


def test_a_coarse_resolution_keeps_one_time_to_a_page() -> None:
    handle = MemoryHandle()
    s = states(handle, resolution_ms=100_000)
    for t in range(3):
        s.put(f"k{t}", t, due_ms=t * 100_000)
    s.flush()
    assert sorted(handle.maps["s_due"].entries) == [(0,), (100_000,), (200_000,)]


def test_a_time_listed_as_before_pages_is_still_swept() -> None:
    """A checkpoint written before pages keeps one time's list per entry."""
    handle = MemoryHandle()
    s = states(handle, resolution_ms=10)
    s.put("a", "a", due_ms=30)
    s.flush()
    handle.maps["s_due"].entries = {(30,): ('["a"]',)}  # as the old layout listed it
    s.put("b", "b", due_ms=20)
    s.flush()
    assert sorted(s.due(30)) == [("a", "a"), ("b", "b")]


def test_keys_due_with_the_input_are_swept_then_and_their_timer_deleted() -> None:
    """due_now, from handleInputRows: once the bucket's timer has come, the keys due are
    handled with the input's slots still cached (each slot read and written once for the
    batch), and the timer is deleted, not left to fire after the input."""
    handle = MemoryHandle()
    s = states(handle, resolution_ms=10, slots=1)
    for key, due in (("a", 5), ("b", 15), ("c", 35)):
        s.put(key, key, due_ms=due)
    s.flush()
    assert handle.timers == {10}
    slots = handle.maps["s"]
    assert s.due_now(9) == []  # the timer has not come: nothing, and it stays
    s.flush()
    assert handle.timers == {10}
    slots.calls = 0
    s.put("c", "c2", due_ms=45)  # the batch's input, at watermark 22
    assert sorted(s.due_now(22)) == [("a", "a"), ("b", "b")]
    s.remove("a")
    s.put("b", "b2", due_ms=50)
    s.flush()
    assert slots.calls == 2  # the one slot, read once and written once
    # 10 deleted; the earliest listed time is c's old 40, a stale listing (c and b are
    # listed under 50), which a sweep skips
    assert handle.timers == {40}
    assert handle.fire(22) == []  # nothing fires after the input
    assert handle.fire(50) == [40]
    assert sorted(s.due(50)) == [("b", "b2"), ("c", "c2")]


@given(
    keys=st.dictionaries(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1), max_size=40),
    before=st.integers(min_value=1, max_value=9),
    after=st.integers(min_value=1, max_value=9),
)
def test_a_bucket_written_with_other_slots_is_moved_to_these(
    keys: dict[str, int], before: int, after: int
) -> None:
    """The number of slots can change between runs of a checkpoint: every key is found, in
    one micro-batch the bucket is rewritten in the new layout, and after it no slot of the
    old one is left."""
    handle = MemoryHandle()
    s = states(handle, None, slots=before)
    for key, value in keys.items():
        s.put(json_text(key), value)
    s.flush()
    s = states(handle, None, slots=after)
    names = sorted(json_text(key) for key in keys)
    assert [s.get(name) for name in names] == [keys[json.loads(name)] for name in names]
    s.flush()
    stored = handle.maps["s"]
    assert {slot for (slot,) in stored.entries} <= {LAYOUT_SLOT, *range(after)}
    stored.calls = 0
    s = states(handle, None, slots=after)
    assert [s.get(name) for name in names] == [keys[json.loads(name)] for name in names]
    assert stored.calls <= after + 1  # no more reading the bucket whole


@pytest.mark.parametrize("count", [3, 200])
def test_slots_written_before_they_named_their_number_are_moved(count: int) -> None:
    """Checkpoints written before slots named their number have 64 slots per bucket and no
    layout entry: read with another number, every key is found, whichever slot it is read
    from first (one that holds keys, or one that is empty in the old layout)."""
    handle = MemoryHandle()
    stored = handle.maps.setdefault("s", MemoryMapState())
    names = [json_text(f"card-{i}") for i in range(count)]
    old: dict[int, dict[str, list[Any]]] = {}
    for i, name in enumerate(names):
        old.setdefault(zlib.crc32(name.encode()) % 64, {})[name] = [i, None]
    stored.entries = {(slot,): (json.dumps(entries),) for slot, entries in old.items()}
    empty_reads = [zlib.crc32(name.encode()) % 16 not in old for name in names]
    assert any(empty_reads) if count == 3 else not all(empty_reads)  # both kinds of first read
    original = dict(stored.entries)
    for first in names:
        stored.entries = dict(original)
        s = states(handle, None, slots=16)
        assert s.get(first) == names.index(first)
        assert [s.get(name) for name in names] == list(range(count))
    s.flush()
    assert (LAYOUT_SLOT,) in stored.entries
    assert all(slot < 16 for (slot,) in stored.entries)


def test_a_key_listed_nowhere_is_kept_without_a_time_and_the_old_form_still_read() -> None:
    """``[state]`` for a key listed nowhere, ``[state, time]`` for a listed one: a slot of
    unlisted keys holds no ``null`` (which state_text would have to check). A slot written
    before that, ``[state, null]``, reads the same."""
    handle = MemoryHandle()
    s = states(handle, resolution_ms=10, slots=1)
    s.put("a", {"x": 1})
    s.put("b", {"x": 2}, due_ms=25)
    s.flush()
    (slot,) = [v for (k,), (v,) in handle.maps["s"].entries.items() if k != LAYOUT_SLOT]
    assert slot == '#1\na\t[{"x":1}]\nb\t[{"x":2},30]'
    handle.maps["s"].entries[(0,)] = ('{"a":[{"x":1},null],"b":[{"x":2},30],"#":1}',)
    assert s.get("a") == {"x": 1}
    s.put("a", {"x": 3}, due_ms=40)  # listed now: it was listed nowhere
    s.flush()
    assert sorted(s.due(40)) == [("a", {"x": 3}), ("b", {"x": 2})]
    s.put("a", {"x": 3})
    s.flush()
    (slot,) = [v for (k,), (v,) in handle.maps["s"].entries.items() if k != LAYOUT_SLOT]
    assert slot == '#1\na\t[{"x":3}]\nb\t[{"x":2}]'  # b: swept


def test_a_key_not_put_is_written_back_as_it_was_read() -> None:
    """A slot is split into its keys' lines when read; a key's state is parsed only when
    the key is read, and a key not put keeps its text, byte for byte (here with spaces that
    no writer of riverbed's puts in), even if its state was changed in place."""
    handle = MemoryHandle()
    handle.maps["s"] = MemoryMapState()
    handle.maps["s"].entries[(0,)] = ('#1\na\t[ {"x": 1} ]\nb\t[ {"x": 2}, 30 ]\nc\t[3]',)
    s = states(handle, resolution_ms=10, slots=1)
    assert s.get("a") == {"x": 1}
    s.put("a", {"x": 5})
    s.get("b")["x"] = 7
    s.flush()
    written = '#1\na\t[{"x":5}]\nb\t[ {"x": 2}, 30 ]\nc\t[3]'
    assert handle.maps["s"].entries[(0,)] == (written,)
    s = states(handle, resolution_ms=10, slots=1)
    assert (s.get("a"), s.get("b"), s.get("c")) == ({"x": 5}, {"x": 2}, 3)


@given(
    st.dictionaries(
        st.text(),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=8,
    )
)
def test_any_keys_and_states_are_read_back(keys: dict[str, Any]) -> None:
    """Keys are JSON texts or a column's strings: one with a tab or a line break in it
    makes its slot's keys be written as JSON strings."""
    handle = MemoryHandle()
    s = states(handle, None, slots=2)
    for key, state in keys.items():
        if state is not None:
            s.put(key, state)
    s.flush()
    s = states(handle, None, slots=2)
    assert {key: s.get(key) for key in keys} == keys
    for (text,) in handle.maps["s"].entries.values():
        quoted = any("\t" in key or "\n" in key for key in read_slot(text)[0])
        assert text.split("\n")[0] == ("#2\x00" if quoted else "#2")
