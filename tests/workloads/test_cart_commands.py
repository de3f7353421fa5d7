"""The shop workload's cart commands, without I/O: the contract's records, the shares asked
for, and the answers the carts' own partition logic (the reference) gives them."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections import Counter

import pytest

from riverbed.eventsourcing.partition import CommandPartition
from riverbed.eventsourcing.shop.carts import CART_TYPE
from riverbed.eventsourcing.shredding import Keyring
from riverbed.workloads import ConfigError
from riverbed.workloads.cart_commands import (
    CHECKOUT_SHARE,
    VALUE_FIELDS,
    VERSIONED_SHARE,
    CartCommand,
    Intent,
    Mistake,
    commands,
)
from riverbed.workloads.shop import ShopConfig
from tests.support.cart_workload import check_answers

CONFIG = ShopConfig(
    seed=4,
    users=500,
    products=40,
    cart_rate=0.5,
    cart_conflict_fraction=0.1,
    cart_invalid_fraction=0.08,
    cart_resend_fraction=0.06,
)
COUNT = 20_000


@functools.cache
def stream(config: ShopConfig = CONFIG, count: int = COUNT) -> tuple[CartCommand, ...]:
    return tuple(itertools.islice(commands(config), count))


def test_the_same_config_gives_the_same_commands_and_another_seed_others() -> None:
    assert tuple(itertools.islice(commands(CONFIG), 2000)) == stream(CONFIG, 2000)
    other = itertools.islice(commands(dataclasses.replace(CONFIG, seed=5)), 2000)
    assert [c.value for c in other] != [c.value for c in stream(CONFIG, 2000)]


def test_another_start_shifts_the_times_and_gives_ids_of_another_run() -> None:
    shifted = itertools.islice(commands(dataclasses.replace(CONFIG, start_ms=1_000)), 2000)
    run_ids = set()
    for command, original in zip(shifted, stream(CONFIG, 2000), strict=True):
        assert command.at_ms - 1_000 == original.at_ms - CONFIG.start_ms
        assert command.value["ts"] - 1_000 == original.value["ts"] - CONFIG.start_ms
        assert command.command_id != original.command_id
        assert command.cart_id != original.cart_id
        ignored = {"ts": 0, "command_id": "", "cart_id": ""}
        assert {**command.value, **ignored} == {**original.value, **ignored}
        run_ids.add(command.cart_id.split("-")[1])
    assert len(run_ids) == 1


def test_every_command_is_a_record_of_the_contract_in_sending_order() -> None:
    cast = CONFIG.cast()
    shoppers = {u.user_id: u for u in cast.users[: cast.shoppers]}
    products = {p.product_id for p in cast.products}
    addresses: dict[str, str] = {}
    for command in stream():
        assert command.key == {"cart_id": command.value["cart_id"]}
        assert tuple(command.value) == VALUE_FIELDS
        assert json.loads(json.dumps(command.value)) == command.value
        value = command.value
        assert value["user_id"] in shoppers
        assert type(value["ts"]) is int and CONFIG.start_ms <= value["ts"] <= command.at_ms
        assert value["expected_version"] is None or type(value["expected_version"]) is int
        data = value["data"]
        if "product_id" in data:
            assert data["product_id"] in products
        if "shipping_address" in data:  # each user ships to one address, in the own country
            address = addresses.setdefault(value["user_id"], data["shipping_address"])
            assert data["shipping_address"] == address
            assert address.endswith(", " + shoppers[value["user_id"]].country)
    times = [c.at_ms for c in stream()]
    assert times == sorted(times)
    ids = [c.command_id for c in stream() if c.intent is not Intent.RESEND]
    assert len(set(ids)) == len(ids)


def test_the_carts_answer_each_command_as_the_generator_meant_it() -> None:
    partition = CommandPartition(kind=CART_TYPE, keyring=Keyring())
    handled = [partition.handle(json.dumps(c.value).encode()) for c in stream()]
    check_answers(stream(), [h.result for h in handled])
    plain = [c for c in stream() if c.intent is Intent.PLAIN]
    assert sum(len(h.events) for h in handled) == len(plain)  # retries and losers add none
    resent = [h.duplicate for h in handled]
    assert resent == [c.intent is Intent.RESEND for c in stream()]
    # Carts still open at the end of the sample are neither checked out nor abandoned yet.
    last_opened = max(c.at_ms for c in stream() if c.opens_cart)
    finished = {c.cart_id for c in stream() if c.opens_cart and c.at_ms < last_opened - 3_600_000}
    carts = [partition.aggregate(cart).state for cart in finished]
    checked_out = sum(cart.checked_out for cart in carts) / len(carts)
    assert CHECKOUT_SHARE - 0.05 < checked_out < CHECKOUT_SHARE + 0.05
    assert all(cart.items for cart in carts if cart.checked_out)


def test_the_shares_are_about_as_configured() -> None:
    intents = Counter(c.intent for c in stream())
    originals = intents[Intent.PLAIN] + intents[Intent.INVALID]
    assert 0.8 < intents[Intent.RIVAL] / intents[Intent.PLAIN] / 0.1 < 1.2
    assert 0.8 < intents[Intent.RESEND] / originals / 0.06 < 1.2
    # Drawn before each command of a cart and once after its last: a bit more than asked.
    assert 0.9 < intents[Intent.INVALID] / originals / 0.08 < 1.5
    mistakes = Counter(c.mistake for c in stream() if c.intent is Intent.INVALID)
    assert set(mistakes) == set(Mistake) and min(mistakes.values()) > 20, mistakes
    versioned = [c.value["expected_version"] is not None for c in stream()
                 if c.intent is Intent.PLAIN]  # fmt: skip
    assert VERSIONED_SHARE - 0.03 < sum(versioned) / len(versioned) < VERSIONED_SHARE + 0.05
    types = Counter(c.value["type"] for c in stream() if c.intent is Intent.PLAIN)
    assert types["AddItem"] > types["CheckOut"] > types["RemoveItem"] > 0


def test_carts_open_at_the_cart_rate() -> None:
    opened = [c.at_ms for c in stream() if c.opens_cart]
    span_s = (opened[-1] - CONFIG.start_ms) / 1000
    assert 0.9 < len(opened) / span_s / CONFIG.cart_rate < 1.1


def test_without_a_cart_rate_there_are_no_commands() -> None:
    assert list(commands(dataclasses.replace(CONFIG, cart_rate=0))) == []
    assert ShopConfig().cart_rate == 0  # the library's default: the CLI turns carts on


@pytest.mark.parametrize(
    "setting",
    [
        {"cart_rate": -1},
        {"cart_rate": float("inf")},
        {"cart_conflict_fraction": 1.5},
        {"cart_invalid_fraction": -0.1},
        {"cart_resend_fraction": 2},
    ],
)
def test_cart_settings_out_of_range_are_refused(setting: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(setting))):
        ShopConfig(**setting)  # type: ignore[arg-type]
