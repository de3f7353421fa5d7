"""As-of lookups in one key's versions (riverbed.pipelines.operators.versioned_row), against
a brute-force scan written from DESIGN.md's rule: the latest change in changelog order
(snapshot rows first, then ``(commitLsn, lsn)``) with ``source.ts_ms <= t``, a snapshot row
counting as valid from the beginning of time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.pipelines.operators.changelog import SourcePosition, parse_change
from riverbed.pipelines.operators.json_rows import Row
from riverbed.pipelines.operators.versioned_row import Version, VersionedRow
from tests.support.fake_capture import FakeCapture


def version(
    ts_ms: int, commit_lsn: int, row: Row | None, *, lsn: int = 0, snapshot: bool = False
) -> Version:
    return Version(
        ts_ms=ts_ms, position=SourcePosition(commit_lsn, lsn), snapshot=snapshot, row=row
    )


GOLD, SILVER, BRONZE = {"tier": "gold"}, {"tier": "silver"}, {"tier": "bronze"}


def test_as_of_is_the_latest_version_at_or_before_the_time() -> None:
    user = VersionedRow([version(300, 3, None), version(100, 1, GOLD)])  # any order
    assert [user.as_of(t) for t in (99, 100, 299, 300, 10**15)] == [None, GOLD, GOLD, None, None]
    assert user.add(version(100, 2, SILVER))  # the same time: the later position wins
    assert user.as_of(100) == SILVER
    assert not user.add(version(100, 2, SILVER))  # a replay
    assert len(user) == 3


def test_a_snapshot_row_is_valid_from_the_beginning_of_time() -> None:
    # Read at 1000, it says what the row was at the snapshot's consistent point.
    user = VersionedRow([version(2_000, 9, SILVER), version(1_000, 5, GOLD, snapshot=True)])
    assert [user.as_of(t) for t in (-(10**15), 0, 999, 1_000, 1_999)] == [GOLD] * 5
    assert user.as_of(2_000) == SILVER
    # Snapshot rows come first in the changelog order, whatever their position.
    assert [v.row for v in user.versions] == [GOLD, SILVER]
    assert user.changed_by(version(1_000, 5, GOLD, snapshot=True), [("c", 0)]) == []  # replay


def test_commit_times_do_not_order_the_versions_the_changelog_does() -> None:
    # The second commit's clock is behind the first's: at 95 and after, the second is the
    # latest change with ts_ms <= t; the first answers no lookup at all.
    user = VersionedRow([version(100, 1, GOLD), version(90, 2, SILVER)])
    assert [user.as_of(t) for t in (85, 90, 95, 100, 200)] == [None, SILVER, SILVER, SILVER, SILVER]
    # A change after both in the log, with an older time still: it answers from its time on.
    clicks = [("c1", 70), ("c2", 85), ("c3", 95), ("c4", 150)]
    assert user.changed_by(version(80, 3, BRONZE), clicks) == ["c2", "c3", "c4"]


def test_a_late_change_corrects_the_lookups_it_answers() -> None:
    user = VersionedRow([version(100, 1, GOLD), version(300, 3, None)])
    clicks = [("c1", 50), ("c2", 150), ("c3", 250), ("c4", 300), ("c5", 400)]
    late = version(200, 2, SILVER)
    assert user.changed_by(late, clicks) == ["c3"]
    user.add(late)
    assert user.as_of(250) == SILVER
    assert user.changed_by(late, clicks) == []  # known now
    assert user.changed_by(version(50, 0, None), clicks) == []  # the same answer


def test_pruning_keeps_the_latest_version_at_or_below_the_watermark() -> None:
    user = VersionedRow([version(100, 1, GOLD), version(200, 2, None), version(300, 3, SILVER)])
    assert user.next_prune_ms() == 200
    user.prune(250)
    assert [v.ts_ms for v in user.versions] == [200, 300]
    assert user.next_prune_ms() == 300
    # The deletion kept hides a late change older than itself (in the log) from lookups
    # after it.
    assert user.changed_by(version(150, 1, GOLD, lsn=1), [("c", 250)]) == []
    user.prune(99)
    assert len(user) == 2
    # In changelog order: the latest version valid at the watermark, whatever the times.
    skewed = VersionedRow([version(100, 1, GOLD), version(90, 2, SILVER), version(400, 3, None)])
    assert skewed.next_prune_ms() == 90
    skewed.prune(95)
    assert [v.row for v in skewed.versions] == [SILVER, None]


def test_versions_of_changes() -> None:
    capture = FakeCapture("user_id", [0])
    created = capture.insert({"user_id": "u1", "name": "Ann", "tier": "gold", "email": "a@x"})
    deleted = capture.delete("u1")
    changes = [parse_change(*record) for record in created + deleted]
    first, second, _ = changes
    assert [Version.of(c, ["name", "tier"]) for c in changes] == [
        Version(
            ts_ms=first.ts_ms,
            position=first.position,
            snapshot=False,
            row={"name": "Ann", "tier": "gold"},
        ),
        Version(ts_ms=second.ts_ms, position=second.position, snapshot=False, row=None),
        None,  # the tombstone
    ]
    capture.rows = {"u2": {"user_id": "u2", "name": "Bob", "tier": "free", "email": "b@x"}}
    (read,) = [parse_change(*record) for record in capture.snapshot()]
    assert Version.of(read, ["tier"]) == Version(
        ts_ms=read.ts_ms, position=read.position, snapshot=True, row={"tier": "free"}
    )


ROWS = [None, GOLD, SILVER]


def scan(versions: list[Version], ts: int) -> Row | None:
    """Brute force (module docstring)."""
    valid = [v for v in versions if v.snapshot or v.ts_ms <= ts]
    return max(valid, key=lambda v: (not v.snapshot, v.position)).row if valid else None


def versions_of(data: st.DataObject, count: int) -> list[Version]:
    """``count`` versions: distinct positions, commit times in no particular order (some
    equal), some of them snapshot rows."""
    commits = data.draw(st.permutations(range(count)))
    return [
        version(
            data.draw(st.integers(0, 10)),
            commit,
            data.draw(st.sampled_from(ROWS)),
            snapshot=data.draw(st.sampled_from([False, False, False, True])),
        )
        for commit in commits
    ]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), count=st.integers(0, 12))
def test_as_of_lookups_in_any_order_of_versions_equal_a_scan(
    data: st.DataObject, count: int
) -> None:
    user, added, floor = VersionedRow(), [], -1
    for next_version in data.draw(st.permutations(versions_of(data, count))):
        if data.draw(st.booleans()):
            floor = max(floor, data.draw(st.integers(-1, 11)))  # the watermark only grows
            user.prune(floor)
        if user.versions and data.draw(st.booleans()):
            replay = data.draw(st.sampled_from(user.versions))
            assert user.changed_by(replay, [(0, 0)]) == []
            assert not user.add(replay)
        lookups = [(f"click at {t}", t) for t in range(floor, 12)]
        before = {name: scan(added, t) for name, t in lookups}
        changed = user.changed_by(next_version, lookups)
        assert user.add(next_version)
        added.append(next_version)
        assert changed == [name for name, t in lookups if scan(added, t) != before[name]]
        assert [user.as_of(t) for _, t in lookups] == [scan(added, t) for _, t in lookups]
        restored = VersionedRow.from_json(user.to_json())
        assert restored.versions == user.versions
        user = restored


@settings(max_examples=200, deadline=None)
@given(data=st.data(), count=st.integers(0, 8))
def test_next_prune_is_the_first_watermark_at_which_pruning_drops_a_version(
    data: st.DataObject, count: int
) -> None:
    versions = versions_of(data, count)

    def drops(watermark_ms: int) -> bool:
        user = VersionedRow(versions)
        user.prune(watermark_ms)
        return len(user) < len(versions)

    watermarks = [-(2**63), *range(-1, 12)]
    first = next((w for w in watermarks if drops(w)), None)
    assert VersionedRow(versions).next_prune_ms() == first
