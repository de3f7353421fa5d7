"""The KIP-848 consumer group state machine, driven heartbeat by heartbeat with a fake clock."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping

import pytest

from riverbed.broker.groups.consumer import (
    ConsumerGroupError,
    ConsumerGroups,
    ConsumerGroupState,
    Heartbeat,
    HeartbeatResult,
    TopicInfo,
)
from riverbed.broker.groups.consumer.assignors import (
    Assignment,
    MemberSubscription,
    RangeAssignor,
    UniformAssignor,
)
from riverbed.broker.groups.consumer.reconcile import MemberState
from riverbed.protocol import ErrorCode as E

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
GROUP = "g"


@contextlib.contextmanager
def refused(code: E) -> Iterator[None]:
    """The block raises a ConsumerGroupError that answers the Kafka error ``code``."""
    with pytest.raises(ConsumerGroupError) as caught:
        yield
    assert caught.value.error_code is code


class Topics:
    """A mutable topic table standing in for the broker's metadata."""

    def __init__(self, **partitions: int) -> None:
        self.table: dict[str, TopicInfo] = {}
        for index, (name, count) in enumerate(partitions.items(), start=1):
            self.add(name, count, topic_id=uuid.UUID(int=index))

    def add(self, name: str, count: int, *, topic_id: uuid.UUID | None = None) -> None:
        self.table[name] = TopicInfo(name=name, topic_id=topic_id or uuid.uuid4(), partitions=count)

    def __call__(self) -> Mapping[str, TopicInfo]:
        return self.table


class Client:
    """What a consumer keeps between heartbeats: member id, epoch and owned partitions."""

    def __init__(self, groups: ConsumerGroups, member_id: str, **join: object) -> None:
        self.groups = groups
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.join = join

    def heartbeat(self, *, now_ms: int = 0, **fields: object) -> HeartbeatResult:
        """One heartbeat; like a client, it adopts the returned assignment at once."""
        if self.epoch == 0:
            base: dict[str, object] = {
                "rebalance_timeout_ms": 300_000,
                "subscribed_topic_names": ["t1"],
                **self.join,
            }
        else:
            base = {}
        request = Heartbeat(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=self.epoch,
            owned=dict(self.owned),
            **{**base, **fields},  # type: ignore[arg-type]
        )
        result = self.groups.heartbeat(request, now_ms=now_ms)
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = dict(result.assignment)
        return result

    def partitions(self, topic_id: uuid.UUID = T1) -> set[int]:
        return set(self.owned.get(topic_id, frozenset()))


def groups_for(topics: Topics, **settings: int) -> ConsumerGroups:
    return ConsumerGroups(topics=topics, **settings)  # type: ignore[arg-type]


def test_first_member_gets_every_partition() -> None:
    groups = groups_for(Topics(t1=6))
    a = Client(groups, "a")
    result = a.heartbeat()
    assert result.member_epoch == 1
    assert result.heartbeat_interval_ms == 5_000
    assert a.partitions() == set(range(6))
    group = groups.get(GROUP)
    assert group is not None and group.state is ConsumerGroupState.STABLE


def test_second_member_gets_half_only_after_the_first_revokes() -> None:
    groups = groups_for(Topics(t1=6))
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    # b is at the new epoch but its partitions are still a's: it waits for them.
    assert b.epoch == 2 and b.partitions() == set()
    group = groups.get(GROUP)
    assert group is not None and group.state is ConsumerGroupState.RECONCILING
    # a is told to keep 3 and stays at epoch 1 until it has revoked the other 3.
    result = a.heartbeat()
    assert result.member_epoch == 1 and len(a.partitions()) == 3
    assert group.members["a"].assignment.state is MemberState.UNREVOKED_PARTITIONS
    # a's next heartbeat no longer lists them: revoked, so a moves to epoch 2 ...
    a.heartbeat()
    assert a.epoch == 2
    # ... and b gets them.
    b.heartbeat()
    assert b.partitions() == set(range(6)) - a.partitions()
    assert len(b.partitions()) == 3
    assert group.state is ConsumerGroupState.STABLE


def test_no_partition_is_ever_owned_twice_while_members_come_and_go() -> None:
    groups = groups_for(Topics(t1=12))
    clients = [Client(groups, f"m{i}") for i in range(4)]
    now = 0
    for round_ in range(12):
        for client in clients[: 1 + min(round_, 3)]:
            client.heartbeat(now_ms=now)
            owners: dict[int, str] = {}
            for other in clients:
                for p in other.partitions():
                    assert p not in owners, f"{p} owned by {owners.get(p)} and {other.member_id}"
                    owners[p] = other.member_id
        now += 100
    assert sorted(len(c.partitions()) for c in clients) == [3, 3, 3, 3]


def test_leave_gives_partitions_to_the_others_and_bumps_the_epoch() -> None:
    groups = groups_for(Topics(t1=6))
    a, b = Client(groups, "a"), Client(groups, "b")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert len(a.partitions()) == 3 and len(b.partitions()) == 3
    group = groups.get(GROUP)
    assert group is not None
    epoch = group.group_epoch
    left = groups.heartbeat(Heartbeat(group_id=GROUP, member_id="b", member_epoch=-1), now_ms=0)
    assert left.member_epoch == -1
    assert group.group_epoch == epoch + 1
    a.heartbeat()
    assert a.partitions() == set(range(6)) and a.epoch == epoch + 1


def test_session_timeout_removes_a_silent_member() -> None:
    groups = groups_for(Topics(t1=4), session_timeout_ms=1_000)
    a, b = Client(groups, "a"), Client(groups, "b")
    for now in (0, 10, 20):
        a.heartbeat(now_ms=now)
        b.heartbeat(now_ms=now)
    assert groups.next_deadline_ms() == 1_020
    assert groups.expire(now_ms=1_019) == []
    a.heartbeat(now_ms=1_000)  # a keeps heartbeating, b has died
    expired = groups.expire(now_ms=1_020)
    assert [(e.member_id, e.reason) for e in expired] == [("b", "its session expired")]
    a.heartbeat(now_ms=1_030)
    assert a.partitions() == {0, 1, 2, 3}
    # b's late heartbeat is refused; it must rejoin with epoch 0.
    with refused(E.unknown_member_id):
        b.heartbeat(now_ms=1_040)


def test_rebalance_timeout_fences_a_member_that_keeps_its_partitions() -> None:
    groups = groups_for(Topics(t1=4))
    a, b = Client(groups, "a", rebalance_timeout_ms=500), Client(groups, "b")
    a.heartbeat(now_ms=0)
    b.heartbeat(now_ms=0)
    # a is asked to revoke two partitions but keeps reporting all four.
    keep = dict(a.owned)
    a.heartbeat(now_ms=100)
    a.owned = keep
    a.heartbeat(now_ms=300)
    assert groups.next_deadline_ms() == 600
    b.heartbeat(now_ms=550)
    expired = groups.expire(now_ms=600)
    assert [e.member_id for e in expired] == ["a"]
    b.heartbeat(now_ms=700)
    assert b.partitions() == {0, 1, 2, 3}


def test_stale_and_future_epochs_are_fenced_previous_epoch_with_subset_is_accepted() -> None:
    groups = groups_for(Topics(t1=4))
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    with refused(E.fenced_member_epoch):
        groups.heartbeat(Heartbeat(group_id=GROUP, member_id="a", member_epoch=7), now_ms=0)
    b.heartbeat()
    a.heartbeat()
    a.heartbeat()  # a revoked and moved to epoch 2
    assert a.epoch == 2
    # The response with epoch 2 was lost: epoch 1 with a subset of the partitions is fine.
    again = groups.heartbeat(
        Heartbeat(group_id=GROUP, member_id="a", member_epoch=1, owned=dict(a.owned)),
        now_ms=0,
    )
    assert again.member_epoch == 2
    # Epoch 1 while claiming partitions that are no longer a's is not.
    with refused(E.fenced_member_epoch):
        groups.heartbeat(
            Heartbeat(
                group_id=GROUP, member_id="a", member_epoch=1, owned={T1: frozenset({0, 1, 2, 3})}
            ),
            now_ms=0,
        )


def test_fenced_member_rejoins_with_epoch_zero_and_same_id() -> None:
    groups = groups_for(Topics(t1=2))
    a = Client(groups, "a")
    a.heartbeat()
    a.epoch, a.owned = 0, {}
    result = a.heartbeat()
    assert result.member_epoch == 1 and a.partitions() == {0, 1}


def test_assignment_sent_only_when_changed_or_on_a_full_request() -> None:
    groups = groups_for(Topics(t1=2))
    a = Client(groups, "a")
    assert a.heartbeat().assignment is not None
    assert a.heartbeat().assignment is None
    full = a.heartbeat(rebalance_timeout_ms=1000, subscribed_topic_names=["t1"])
    assert full.assignment == {T1: frozenset({0, 1})}


def test_subscription_change_and_new_partitions_bump_the_group_epoch() -> None:
    topics = Topics(t1=2, t2=2)
    groups = groups_for(topics)
    a = Client(groups, "a")
    a.heartbeat()
    a.heartbeat(subscribed_topic_names=["t1", "t2"])
    assert a.epoch == 2
    assert a.partitions(T2) == {0, 1}
    topics.add("t2", 3, topic_id=T2)
    a.heartbeat()
    assert a.epoch == 3 and a.partitions(T2) == {0, 1, 2}
    a.heartbeat(subscribed_topic_names=["t2"])
    # Dropping t1 revokes it first, then the member moves on.
    a.heartbeat()
    assert a.partitions(T1) == set() and a.partitions(T2) == {0, 1, 2}


def test_regex_subscription_follows_new_topics() -> None:
    topics = Topics(t1=1)
    groups = groups_for(topics)
    a = Client(groups, "a", subscribed_topic_names=[], subscribed_topic_regex="(^orders-.*)")
    a.heartbeat()
    assert a.owned == {}
    topics.add("orders-eu", 2)
    topics.add("other", 2)
    a.heartbeat()
    assert {p for parts in a.owned.values() for p in parts} == {0, 1}
    assert list(a.owned) == [topics.table["orders-eu"].topic_id]
    with refused(E.invalid_regular_expression):
        Client(groups, "b", subscribed_topic_regex="(").heartbeat()


def test_static_member_leaves_with_minus_two_and_its_successor_takes_over() -> None:
    groups = groups_for(Topics(t1=4), session_timeout_ms=1_000)
    a = Client(groups, "a1", instance_id="host-a")
    b = Client(groups, "b")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    kept = a.partitions()
    group = groups.get(GROUP)
    assert group is not None and len(kept) == 2
    epoch = group.group_epoch
    groups.heartbeat(
        Heartbeat(group_id=GROUP, member_id="a1", member_epoch=-2, instance_id="host-a"),
        now_ms=10,
    )
    # The instance id is not free for another live process in between ...
    b.heartbeat(now_ms=20)
    assert b.partitions() != set(range(4))
    # ... and a new process with that instance id gets the same partitions, no rebalance.
    a2 = Client(groups, "a2", instance_id="host-a")
    a2.heartbeat(now_ms=30)
    assert a2.partitions() == kept
    assert group.group_epoch == epoch and set(group.members) == {"a2", "b"}


def test_static_instance_in_use_is_unreleased_and_impostor_is_fenced() -> None:
    groups = groups_for(Topics(t1=1))
    Client(groups, "a1", instance_id="i").heartbeat()
    with refused(E.unreleased_instance_id):
        Client(groups, "a2", instance_id="i").heartbeat()
    with refused(E.fenced_instance_id):
        groups.heartbeat(
            Heartbeat(group_id=GROUP, member_id="zz", member_epoch=1, instance_id="i"), now_ms=0
        )


def test_static_member_that_never_returns_expires() -> None:
    groups = groups_for(Topics(t1=2), session_timeout_ms=100)
    a = Client(groups, "a", instance_id="i")
    b = Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    groups.heartbeat(
        Heartbeat(group_id=GROUP, member_id="a", member_epoch=-2, instance_id="i"), now_ms=0
    )
    b.heartbeat(now_ms=50)
    assert [e.member_id for e in groups.expire(now_ms=100)] == ["a"]
    b.heartbeat(now_ms=150)
    b.heartbeat(now_ms=160)
    assert b.partitions() == {0, 1}


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"group_id": ""}, E.invalid_request),
        ({"member_id": ""}, E.invalid_request),
        ({"instance_id": ""}, E.invalid_request),
        ({"rack_id": ""}, E.invalid_request),
        ({"rebalance_timeout_ms": -1}, E.invalid_request),
        ({"owned": None}, E.invalid_request),
        ({"owned": {T1: frozenset({0})}}, E.invalid_request),
        ({"subscribed_topic_names": None}, E.invalid_request),
        ({"subscribed_topic_names": [], "subscribed_topic_regex": ""}, E.invalid_request),
        ({"member_epoch": -3}, E.invalid_request),
        ({"server_assignor": "sticky"}, E.unsupported_assignor),
    ],
)
def test_invalid_join_requests(fields: dict[str, object], code: E) -> None:
    groups = groups_for(Topics(t1=1))
    request: dict[str, object] = {
        "group_id": GROUP,
        "member_id": "a",
        "member_epoch": 0,
        "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ["t1"],
        "owned": {},
        **fields,
    }
    with refused(code):
        groups.heartbeat(Heartbeat(**request), now_ms=0)  # type: ignore[arg-type]
    assert GROUP not in groups


def test_unknown_group_and_member() -> None:
    groups = groups_for(Topics(t1=1))
    with refused(E.group_id_not_found):
        groups.heartbeat(Heartbeat(group_id=GROUP, member_id="a", member_epoch=3), now_ms=0)
    with refused(E.group_id_not_found):
        groups.heartbeat(Heartbeat(group_id=GROUP, member_id="a", member_epoch=-1), now_ms=0)
    Client(groups, "a").heartbeat()
    with refused(E.unknown_member_id):
        groups.heartbeat(Heartbeat(group_id=GROUP, member_id="b", member_epoch=1), now_ms=0)


def test_max_size() -> None:
    groups = groups_for(Topics(t1=1), max_size=1)
    Client(groups, "a").heartbeat()
    with refused(E.group_max_size_reached):
        Client(groups, "b").heartbeat()


def test_offset_commit_validation_and_delete() -> None:
    groups = groups_for(Topics(t1=1))
    a = Client(groups, "a")
    a.heartbeat()
    groups.validate_offset_commit(GROUP, member_id="a", member_epoch=1)
    with refused(E.stale_member_epoch):
        groups.validate_offset_commit(GROUP, member_id="a", member_epoch=0)
    with refused(E.unknown_member_id):
        groups.validate_offset_commit(GROUP, member_id="", member_epoch=-1)
    with refused(E.non_empty_group):
        groups.delete(GROUP)
    groups.heartbeat(Heartbeat(group_id=GROUP, member_id="a", member_epoch=-1), now_ms=0)
    groups.validate_offset_commit(GROUP, member_id="", member_epoch=-1)  # admin, empty group
    group = groups.get(GROUP)
    assert group is not None and group.state is ConsumerGroupState.EMPTY
    groups.delete(GROUP)
    assert GROUP not in groups


def test_server_assignor_range_is_used_when_members_ask_for_it() -> None:
    groups = groups_for(Topics(t1=3))
    a = Client(groups, "a", server_assignor="range")
    b = Client(groups, "b", server_assignor="range")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert a.partitions() == {0, 1} and b.partitions() == {2}


# -- assignors ---------------------------------------------------------------------------


def sub(*topics: uuid.UUID, previous: Assignment | None = None) -> MemberSubscription:
    return MemberSubscription(topic_ids=frozenset(topics), previous=previous or {})


def test_uniform_is_balanced_and_sticky() -> None:
    assignor = UniformAssignor()
    first = assignor.assign({"a": sub(T1), "b": sub(T1)}, {T1: 6})
    assert sorted(len(a[T1]) for a in first.values()) == [3, 3]
    second = assignor.assign(
        {"a": sub(T1, previous=first["a"]), "b": sub(T1, previous=first["b"]), "c": sub(T1)},
        {T1: 6},
    )
    assert sorted(len(a[T1]) for a in second.values()) == [2, 2, 2]
    assert second["a"][T1] <= first["a"][T1] and second["b"][T1] <= first["b"][T1]


def test_uniform_with_different_subscriptions() -> None:
    assignment = UniformAssignor().assign(
        {"a": sub(T1), "b": sub(T1, T2), "c": sub(T2)}, {T1: 4, T2: 2}
    )
    every = [(t, p) for m in assignment.values() for t, ps in m.items() for p in ps]
    assert sorted(every) == sorted([(T1, p) for p in range(4)] + [(T2, p) for p in range(2)])
    assert sorted(sum(len(ps) for ps in m.values()) for m in assignment.values()) == [2, 2, 2]
    assert T2 not in assignment["a"] and T1 not in assignment["c"]


def test_uniform_drops_partitions_of_topics_no_longer_subscribed_or_gone() -> None:
    previous = {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assignment = UniformAssignor().assign({"a": sub(T1, previous=previous)}, {T1: 2})
    assert assignment == {"a": {T1: frozenset({0, 1})}}


def test_range_assignor() -> None:
    assignment = RangeAssignor().assign({"b": sub(T1, T2), "a": sub(T1, T2)}, {T1: 3, T2: 2})
    assert assignment["a"] == {T1: frozenset({0, 1}), T2: frozenset({0})}
    assert assignment["b"] == {T1: frozenset({2}), T2: frozenset({1})}
