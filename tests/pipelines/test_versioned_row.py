"""As-of lookups in one key's versions (riverbed.pipelines.operators.versioned_row), against
a brute-force scan."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.pipelines.operators.changelog import SourcePosition, parse_change
from riverbed.pipelines.operators.rows import Row
from riverbed.pipelines.operators.versioned_row import Version, VersionedRow
from tests.pipelines.test_changelog import Capture


def version(ts_ms: int, commit_lsn: int, row: Row | None) -> Version:
    return Version(ts_ms=ts_ms, position=SourcePosition(commit_lsn, 0), row=row)


GOLD, SILVER = {"tier": "gold"}, {"tier": "silver"}


def test_as_of_is_the_latest_version_at_or_before_the_time() -> None:
    user = VersionedRow([version(300, 3, None), version(100, 1, GOLD)])  # any order
    assert [user.as_of(t) for t in (99, 100, 299, 300, 10**15)] == [None, GOLD, GOLD, None, None]
    assert user.add(version(100, 2, SILVER))  # the same time: the later position wins
    assert user.as_of(100) == SILVER
    assert not user.add(version(100, 2, SILVER))  # a replay
    assert len(user) == 3


def test_a_late_change_corrects_the_lookups_it_answers() -> None:
    user = VersionedRow([version(100, 1, GOLD), version(300, 3, None)])
    clicks = [("c1", 50), ("c2", 150), ("c3", 250), ("c4", 300), ("c5", 400)]
    late = version(200, 2, SILVER)
    assert user.changed_by(late, clicks) == ["c3"]
    user.add(late)
    assert user.as_of(250) == SILVER
    assert user.changed_by(late, clicks) == []  # known now
    assert user.changed_by(version(120, 4, GOLD), clicks) == []  # the same answer


def test_pruning_keeps_the_latest_version_at_or_below_the_watermark() -> None:
    user = VersionedRow([version(100, 1, GOLD), version(200, 2, None), version(300, 3, SILVER)])
    user.prune(250)
    assert [v.ts_ms for v in user.versions] == [200, 300]
    # The deletion kept hides a late change older than itself from lookups after it.
    assert user.changed_by(version(150, 4, GOLD), [("c", 250)]) == []
    user.prune(99)
    assert len(user) == 2


def test_versions_of_changes() -> None:
    capture = Capture("user_id", [0])
    created = capture.insert({"user_id": "u1", "name": "Ann", "tier": "gold", "email": "a@x"})
    deleted = capture.delete("u1")
    changes = [parse_change(*record) for record in created + deleted]
    first, second, _ = changes
    assert [Version.of(c, ["name", "tier"]) for c in changes] == [
        Version(ts_ms=first.ts_ms, position=first.position, row={"name": "Ann", "tier": "gold"}),
        Version(ts_ms=second.ts_ms, position=second.position, row=None),
        None,  # the tombstone
    ]


ROWS = [None, GOLD, SILVER]


def scan(versions: list[Version], ts: int) -> Row | None:
    """Brute force: the row of the latest (ts, position) at or before ts."""
    eligible = [v for v in versions if v.ts_ms <= ts]
    return max(eligible, key=lambda v: (v.ts_ms, v.position)).row if eligible else None


@settings(max_examples=300, deadline=None)
@given(data=st.data(), count=st.integers(0, 12))
def test_as_of_lookups_in_any_order_of_versions_equal_a_scan(
    data: st.DataObject, count: int
) -> None:
    commits = data.draw(st.permutations(range(count)))
    versions = [
        version(data.draw(st.integers(0, 10)), commit, data.draw(st.sampled_from(ROWS)))
        for commit in commits
    ]
    user, added, floor = VersionedRow(), [], -1
    for next_version in data.draw(st.permutations(versions)):
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
