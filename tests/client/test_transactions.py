"""``riverbed.client.TransactionAdmin``'s own errors, without a broker (the requests
themselves are tested through ``riverbed transactions``, in tests/cli)."""

from __future__ import annotations

import pytest

from riverbed.client import (
    BrokerUnreachableError,
    ClientError,
    InvalidAddressError,
    ListFilters,
    TransactionAdmin,
)
from tests.support.ports import free_port


def admin(bootstrap: str) -> TransactionAdmin:
    return TransactionAdmin(bootstrap, connect_timeout_s=0.3, request_timeout_s=1)


def test_a_malformed_bootstrap_is_an_invalid_address() -> None:
    with admin("no-port") as transactions, pytest.raises(InvalidAddressError) as raised:
        transactions.list_transactions(ListFilters())
    assert isinstance(raised.value, ClientError) and isinstance(raised.value, ValueError)
    assert str(raised.value) == "not HOST:PORT: 'no-port'"


def test_no_broker_is_one_client_error_naming_the_bootstrap_list() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    with admin(bootstrap) as transactions, pytest.raises(BrokerUnreachableError) as raised:
        transactions.describe_transactions(["t"])
    assert str(raised.value) == (
        f"no broker reachable at {bootstrap} within 0.3 s: Connection refused"
    )
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)
