"""The classic group coordinator as a state machine: a fake clock, no sockets.

The offset store is real (a LogManager in a temporary directory), so commits really go
through ``__consumer_offsets`` and are read back by a fresh store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from riverbed.broker.groups import (
    GroupCoordinator,
    GroupSettings,
    ManualTimers,
    OffsetStore,
    OffsetValue,
)
from riverbed.broker.groups.classic import GroupState, JoinResult
from riverbed.broker.groups.classic.subscription import subscription_topics
from riverbed.broker.groups.consumer import Heartbeat
from riverbed.broker.groups.offsets_topic_records import OffsetKey, encode_key
from riverbed.broker.internal_topics import (
    OFFSETS_TOPIC,
    InternalTopic,
    java_string_hash,
    partition_for,
)
from riverbed.log import Log, LogManager, TopicConfig
from riverbed.protocol import ErrorCode as E

T = TypeVar("T")
SESSION_MS = 10_000
REBALANCE_MS = 30_000


async def _flush(logs: Iterable[Log]) -> None:
    for log in logs:
        log.flush()


class Harness:
    def __init__(self, data_dir: Path, *, settings: GroupSettings) -> None:
        self.timers = ManualTimers()
        self.data_dir = data_dir
        self.logs = LogManager.open(data_dir, defaults=TopicConfig(), clock=self.timers.now_ms)
        self.store = self.new_store()
        self.store.load()
        self.coordinator = GroupCoordinator(settings=settings, store=self.store, timers=self.timers)
        self.coordinator.finish_loading()

    async def simple_commit(self, group: str, offsets: dict[tuple[str, int], OffsetValue]) -> E:
        """A commit without a member (generation -1), as admin tools and consumers using
        assign() make."""
        return await self.coordinator.commit_offsets(
            group_id=group,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets=offsets,
        )

    def new_store(self) -> OffsetStore:
        offsets = InternalTopic(
            self.logs, OFFSETS_TOPIC, flush=_flush, clock=self.timers.now_ms, partitions=3
        )
        return OffsetStore(offsets)

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = SESSION_MS,
        require_known: bool = True,
    ) -> asyncio.Task[JoinResult]:
        return asyncio.get_running_loop().create_task(
            self.coordinator.join_group(
                group_id=group,
                member_id=member_id,
                group_instance_id=instance,
                client_id="client",
                client_host="/127.0.0.1",
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=REBALANCE_MS,
                protocol_type="consumer",
                protocols=protocols or [("range", b"r")],
                require_known_member_id=require_known,
            )
        )

    async def member(self, **kwargs: Any) -> JoinResult:
        """Join as a new dynamic member (MEMBER_ID_REQUIRED first) and wait for the answer."""
        first = await self.join(**kwargs)
        assert first.error_code == E.member_id_required
        return await self.join(first.member_id, **kwargs)

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None
    ) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(
            self.coordinator.sync_group(
                group_id="g",
                generation_id=generation,
                member_id=member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name=None,
                assignments=assignments or {},
            )
        )

    def heartbeat(self, member_id: str, generation: int, *, instance: str | None = None) -> E:
        return self.coordinator.heartbeat(
            group_id="g", generation_id=generation, member_id=member_id, group_instance_id=instance
        )

    def state(self, group: str = "g") -> GroupState:
        found = self.coordinator.group(group)
        return GroupState.DEAD if found is None else found.state


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def run(
    tmp_path: Path,
    test: Callable[[Harness], Coroutine[Any, Any, T]],
    *,
    delay_ms: int = 0,
    **settings: Any,
) -> T:
    async def main() -> T:
        harness = Harness(
            tmp_path / "data",
            settings=GroupSettings(initial_rebalance_delay_ms=delay_ms, **settings),
        )
        try:
            return await test(harness)
        finally:
            await harness.coordinator.close()
            harness.logs.close()

    return asyncio.run(main())


def test_a_lone_member_gets_an_id_then_generation_one_as_leader(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        first = await h.join()
        assert first.error_code == E.member_id_required and first.member_id.startswith("client-")
        joined = await h.join(first.member_id)
        assert joined.error_code == E.none
        assert joined.generation_id == 1
        assert joined.leader == joined.member_id
        assert joined.protocol_name == "range"
        assert [m[0] for m in joined.members] == [joined.member_id]
        assert h.state() is GroupState.COMPLETING_REBALANCE
        synced = await h.sync(joined.member_id, 1, {joined.member_id: b"all"})
        assert (synced.error_code, synced.assignment) == (E.none, b"all")
        assert h.state() is GroupState.STABLE
        assert h.heartbeat(joined.member_id, 1) == E.none

    run(tmp_path, test)


def test_initial_delay_waits_for_more_members_and_extends(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        first = await h.join()
        a = h.join(first.member_id)
        await settle()
        h.timers.advance(2_000)
        second = await h.join()
        b = h.join(second.member_id)
        await settle()
        h.timers.advance(1_500)  # 3.5 s: the first delay ended at 3 s, extended to 6 s for b
        await settle()
        assert not a.done() and h.state() is GroupState.PREPARING_REBALANCE
        h.timers.advance(2_499)
        await settle()
        assert not a.done()
        h.timers.advance(1)
        await settle()
        ra, rb = a.result(), b.result()
        assert ra.generation_id == rb.generation_id == 1
        assert ra.leader == rb.leader == ra.member_id
        assert len(ra.members) == 2 and rb.members == ()

    run(tmp_path, test, delay_ms=3_000)


async def _stable_pair(h: Harness) -> tuple[JoinResult, JoinResult]:
    first = await h.join()
    second = await h.join()
    a, b = h.join(first.member_id), h.join(second.member_id)
    ra, rb = await a, await b
    leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
    follower_sync = h.sync(follower.member_id, follower.generation_id)
    await settle()
    assert not follower_sync.done(), "a follower waits for the leader's assignments"
    assignments = {leader.member_id: b"L", follower.member_id: b"F"}
    assert (await h.sync(leader.member_id, leader.generation_id, assignments)).assignment == b"L"
    assert (await follower_sync).assignment == b"F"
    return leader, follower


def test_a_silent_member_expires_after_its_session_timeout(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        leader, follower = await _stable_pair(h)
        h.timers.advance(SESSION_MS - 1)
        assert h.heartbeat(leader.member_id, 1) == E.none
        assert h.state() is GroupState.STABLE
        h.timers.advance(1)  # the follower said nothing for a whole session
        assert h.state() is GroupState.PREPARING_REBALANCE
        assert h.heartbeat(leader.member_id, 1) == E.rebalance_in_progress
        assert h.heartbeat(follower.member_id, 1) == E.unknown_member_id
        rejoined = await h.join(leader.member_id)
        assert rejoined.generation_id == 2 and len(rejoined.members) == 1

    run(tmp_path, test)


def test_a_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        leader, follower = await _stable_pair(h)
        newcomer = await h.join()
        late = h.join(newcomer.member_id)
        again = h.join(leader.member_id)
        await settle()
        for _ in range(REBALANCE_MS // 5_000 - 1):
            h.timers.advance(5_000)
            # Alive (heartbeats say: rejoin), but it never rejoins.
            assert h.heartbeat(follower.member_id, 1) == E.rebalance_in_progress
        h.timers.advance(4_999)
        await settle()
        assert not again.done()
        h.timers.advance(1)
        await settle()
        assert again.result().generation_id == late.result().generation_id == 2
        assert {m[0] for m in again.result().members} == {leader.member_id, newcomer.member_id}
        assert h.heartbeat(follower.member_id, 1) == E.unknown_member_id

    run(tmp_path, test)


def test_leader_never_syncing_removes_it_after_the_rebalance_timeout(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        first, second = await h.join(), await h.join()
        ra, rb = await asyncio.gather(h.join(first.member_id), h.join(second.member_id))
        follower = ra if ra.leader != ra.member_id else rb
        waiting = h.sync(follower.member_id, 1)
        await settle()
        for _ in range(REBALANCE_MS // 5_000 - 1):
            h.timers.advance(5_000)  # the leader heartbeats but never sends SyncGroup
            assert h.heartbeat(ra.leader, 1) == E.none
        h.timers.advance(5_000)
        await settle()
        assert waiting.result().error_code == E.rebalance_in_progress
        group = h.coordinator.group("g")
        assert group is not None and ra.leader not in group.members

    run(tmp_path, test)


def test_errors_a_client_expects(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        leader, _ = await _stable_pair(h)
        assert h.heartbeat(leader.member_id, 7) == E.illegal_generation
        assert h.heartbeat("nobody", 1) == E.unknown_member_id
        assert (await h.sync("nobody", 1)).error_code == E.unknown_member_id
        assert (await h.join("nobody")).error_code == E.unknown_member_id
        other = await h.join(leader.member_id, protocols=[("roundrobin", b"")])
        assert other.error_code == E.inconsistent_group_protocol
        assert (await h.join(session_ms=10)).error_code == E.invalid_session_timeout
        assert await h.coordinator.delete_group("g") == E.non_empty_group
        assert await h.coordinator.delete_group("missing") == E.group_id_not_found
        commit = await h.coordinator.commit_offsets(
            group_id="g",
            generation_id=0,
            member_id=leader.member_id,
            group_instance_id=None,
            offsets={("t", 0): OffsetValue(offset=1)},
        )
        assert commit == E.illegal_generation

    run(tmp_path, test)


def test_group_max_size(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        await h.join()
        assert (await h.join()).error_code == E.group_max_size_reached

    run(tmp_path, test, max_size=1)


def test_protocol_chosen_by_votes_among_those_everyone_supports(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        a, b, c = await h.join(), await h.join(), await h.join()
        results = await asyncio.gather(
            h.join(a.member_id, protocols=[("sticky", b""), ("range", b""), ("rr", b"")]),
            h.join(b.member_id, protocols=[("rr", b""), ("range", b"")]),
            h.join(c.member_id, protocols=[("range", b""), ("rr", b"")]),
        )
        # sticky is not supported by all; rr gets b's vote, range gets a's and c's.
        assert {r.protocol_name for r in results} == {"range"}

    run(tmp_path, test)


def test_static_member_rejoins_without_a_rebalance(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        a = h.join(instance="a", require_known=True)
        b = h.join(instance="b", require_known=True)
        await settle()
        h.timers.advance(6_000)  # the initial delay, extended once because b came
        ra, rb = await a, await b  # static members need no MEMBER_ID_REQUIRED round
        assert ra.error_code == rb.error_code == E.none and ra.generation_id == 1
        leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
        assignments = {leader.member_id: b"L", follower.member_id: b"F"}
        follower_sync = h.sync(follower.member_id, 1)
        await h.sync(leader.member_id, 1, assignments)
        await follower_sync
        instance = "a" if follower is ra else "b"
        # The follower's process restarts: new join with its instance id and no member id.
        back = await h.join(instance=instance)
        assert back.error_code == E.none
        assert back.generation_id == 1, "no new generation"
        assert back.member_id != follower.member_id
        assert h.state() is GroupState.STABLE
        assert (await h.sync(back.member_id, 1)).assignment == b"F"
        assert h.heartbeat(leader.member_id, 1) == E.none
        assert h.heartbeat(follower.member_id, 1, instance=instance) == E.fenced_instance_id

    run(tmp_path, test, delay_ms=3_000)


def test_leave_group_removes_members_and_rebalances(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        leader, follower = await _stable_pair(h)
        code, codes = h.coordinator.leave_group(
            group_id="g", members=[(follower.member_id, None), ("nobody", None)]
        )
        assert (code, codes) == (E.none, [E.none, E.unknown_member_id])
        assert h.heartbeat(leader.member_id, 1) == E.rebalance_in_progress
        h.coordinator.leave_group(group_id="g", members=[(leader.member_id, None)])
        assert h.state() is GroupState.EMPTY
        assert await h.coordinator.delete_group("g") == E.none
        assert h.state() is GroupState.DEAD

    run(tmp_path, test)


def test_offsets_are_durable_and_reloaded(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        code = await h.simple_commit(
            "simple",
            {
                ("t", 0): OffsetValue(offset=42, leader_epoch=3, metadata="m"),
                ("t", 1): OffsetValue(offset=7, metadata=None),
            },
        )
        assert code == E.none
        await h.simple_commit(
            "simple", {("t", 0): OffsetValue(offset=43, leader_epoch=3, metadata="n")}
        )
        await h.coordinator.delete_offsets("simple", [("t", 1)])
        fresh = h.new_store()
        fresh.load()
        (got,) = fresh.fetch("simple").items()
        assert got[0] == ("t", 0)
        assert (got[1].offset, got[1].leader_epoch, got[1].metadata) == (43, 3, "n")
        assert "simple" in fresh.group_ids()

    run(tmp_path, test)


def test_a_committed_offset_that_is_not_a_json_object_is_skipped_at_load(
    tmp_path: Path,
) -> None:
    async def test(h: Harness) -> None:
        await h.simple_commit("g", {("t", 0): OffsetValue(offset=5)})
        offsets = InternalTopic(h.logs, OFFSETS_TOPIC, flush=_flush, clock=h.timers.now_ms)
        key = encode_key(OffsetKey(group="g", topic="t", partition=1))
        await offsets.append("g", [(key, b"[1]")])  # JSON, but not an offset value
        fresh = h.new_store()
        fresh.load()
        assert {tp: value.offset for tp, value in fresh.fetch("g").items()} == {("t", 0): 5}

    run(tmp_path, test)


def test_offsets_of_an_empty_group_expire(tmp_path: Path) -> None:
    async def test(h: Harness) -> None:
        await h.simple_commit("old", {("t", 0): OffsetValue(offset=1)})
        h.timers.advance(59_000)
        assert await h.coordinator.expire_offsets() == 0
        h.timers.advance(1_000)
        assert await h.coordinator.expire_offsets() == 1
        assert h.store.fetch("old") == {}
        assert h.state("old") is GroupState.DEAD
        fresh = h.new_store()
        fresh.load()
        assert fresh.group_ids() == set()

    run(tmp_path, test, offsets_retention_ms=60_000)


def test_offsets_of_an_empty_consumer_protocol_group_expire(tmp_path: Path) -> None:
    """Kafka's rule for consumer-protocol groups: retention counts from the commit, and only
    once the group is empty; a group left with no offsets is removed."""

    async def test(h: Harness) -> None:
        def beat(group: str, epoch: int) -> None:
            h.coordinator.consumer_heartbeat(
                Heartbeat(
                    group_id=group,
                    member_id=f"{group}-member",
                    member_epoch=epoch,
                    rebalance_timeout_ms=30_000,
                    subscribed_topic_names=("t",) if epoch == 0 else None,
                    owned={} if epoch == 0 else None,
                )
            )

        for group in ("gone", "live"):
            beat(group, 0)
            code = await h.coordinator.commit_offsets(
                group_id=group,
                generation_id=1,
                member_id=f"{group}-member",
                group_instance_id=None,
                offsets={("t", 0): OffsetValue(offset=1)},
            )
            assert code == E.none
        beat("gone", -1)
        for _ in range(2):
            h.timers.advance(30_000)
            beat("live", 1)  # within its 45 s session
        assert await h.coordinator.expire_offsets() == 1
        assert h.store.fetch("gone") == {} and "gone" not in h.coordinator.consumer
        assert h.store.fetch("live") != {} and "live" in h.coordinator.consumer
        assert [g.group_id for g in h.coordinator.list_groups()] == ["live"]

    run(tmp_path, test, offsets_retention_ms=60_000)


def test_java_hash_and_partition_like_kafka() -> None:
    assert java_string_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", partitions=50) == 0  # Utils.abs(MIN) = 0
    assert partition_for("hello", partitions=50) == 99162322 % 50


def test_subscription_topics() -> None:
    metadata = (
        b"\x00\x01" + b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02bc" + b"\xff\xff\xff\xff"
    )
    assert subscription_topics(metadata) == ["a", "bc"]
    assert subscription_topics(b"\x00") is None
