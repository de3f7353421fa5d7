"""``riverbed transactions`` against fake brokers (the broker's codec answering from a table):
versions other than riverbed's, more than one broker, a coordinator elsewhere, one that is
still loading. The real broker is in ``test_transactions``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from riverbed.cli.main import main
from riverbed.protocol import ApiKey, FrameReader, Request, decode_request, encode_response
from tests.support.transactions import DESCRIBE, LIST, describe_answer

Answer = Callable[[Request], dict[str, Any]]


class FakeBroker:
    """Answers each request from ``answers`` (api key → request → response dict) with the
    broker's codec, and ApiVersions with ``versions``; records what it was asked."""

    def __init__(
        self, *, versions: dict[ApiKey, tuple[int, int]], answers: dict[ApiKey, Answer]
    ) -> None:
        self.versions = versions
        self.answers = answers
        self.requests: list[Request] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        reader = FrameReader()
        with connection:
            while data := connection.recv(65536):
                reader.receive_data(data)
                while (frame := reader.next_frame()) is not None:
                    request = decode_request(frame)
                    self.requests.append(request)
                    connection.sendall(encode_response(request, self._answer(request)))

    def _answer(self, request: Request) -> dict[str, Any]:
        if request.api_key == ApiKey.API_VERSIONS:
            keys = [{"api_key": key, "min_version": low, "max_version": high}
                    for key, (low, high) in self.versions.items()]  # fmt: skip
            return {"error_code": 0, "api_keys": keys, "throttle_time": 0}
        return self.answers[request.api_key](request)

    def asked(self, api_key: ApiKey) -> list[Request]:
        return [request for request in self.requests if request.api_key == api_key]

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def fake_brokers() -> Iterator[list[FakeBroker]]:
    """A list for the test's fake brokers, closed after the test."""
    made: list[FakeBroker] = []
    yield made
    for broker in made:
        broker.close()


def node(node_id: int, broker: FakeBroker) -> dict[str, Any]:
    host, port = broker.address.rsplit(":", 1)
    return {"node_id": node_id, "host": host, "port": int(port)}


def metadata(*nodes: dict[str, Any]) -> Answer:
    return lambda request: {"brokers": list(nodes), "topics": []}


def listing(*ids: str) -> Answer:
    def answer(request: Request) -> dict[str, Any]:
        states = [{"transactional_id": i, "producer_id": 10 + n, "transaction_state": "Ongoing"}
                  for n, i in enumerate(ids)]  # fmt: skip
        return {"error_code": 0, "unknown_state_filters": [], "transaction_states": states}

    return answer


BASE_VERSIONS = {ApiKey.METADATA: (0, 12), ApiKey.FIND_COORDINATOR: (0, 4)}


def run(
    capsys: pytest.CaptureFixture[str], bootstrap: FakeBroker, *args: str
) -> tuple[int, str, str]:
    code = main(["transactions", *args, "--bootstrap", bootstrap.address,
                 "--connect-timeout-ms", "2000"])  # fmt: skip
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_asks_every_broker_and_names_each_coordinator(
    capsys: pytest.CaptureFixture[str], fake_brokers: list[FakeBroker]
) -> None:
    versions = {**BASE_VERSIONS, LIST: (0, 1)}
    first = FakeBroker(versions=versions, answers={LIST: listing("b", "d")})
    second = FakeBroker(versions=versions, answers={LIST: listing("a", "c")})
    fake_brokers += [first, second]
    first.answers[ApiKey.METADATA] = metadata(node(7, first), node(3, second))
    code, out, err = run(capsys, first, "list", "--duration-ms", "5")
    assert (code, err) == (0, "")
    rows = [line.split() for line in out.splitlines()]
    assert rows == [
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        ["a", "3", "10", "Ongoing"],
        ["b", "7", "10", "Ongoing"],
        ["c", "3", "11", "Ongoing"],
        ["d", "7", "11", "Ongoing"],
    ]
    # The highest versions both sides speak: Metadata v12, ListTransactions v1 (the fake's).
    assert [r.api_version for r in first.asked(ApiKey.METADATA)] == [12]
    asked = first.asked(LIST) + second.asked(LIST)
    assert [(r.api_version, r.body.duration_filter) for r in asked] == [(1, 5), (1, 5)]


def test_pattern_needs_list_transactions_v2_and_the_api_must_be_served(
    capsys: pytest.CaptureFixture[str], fake_brokers: list[FakeBroker]
) -> None:
    old = FakeBroker(versions={**BASE_VERSIONS, LIST: (0, 1)}, answers={LIST: listing("a")})
    without = FakeBroker(versions=BASE_VERSIONS, answers={})
    fake_brokers += [old, without]
    for broker in fake_brokers:
        broker.answers[ApiKey.METADATA] = metadata(node(1, broker))
    code, out, err = run(capsys, old, "list", "--pattern", "a.*")
    assert (code, out) == (1, "")
    assert err == (
        f"riverbed transactions: --pattern needs ListTransactions v2; broker 1 ({old.address}) "
        "serves up to v1\n"
    )
    assert old.asked(LIST) == []
    code, out, err = run(capsys, without, "list")
    assert (code, out) == (1, "")
    assert err == (
        f"riverbed transactions: the broker at {without.address} cannot answer: "
        "ListTransactions v0-2 is not served (the broker serves none)\n"
    )


def test_describe_goes_to_each_coordinator_and_retries_one_that_is_loading(
    capsys: pytest.CaptureFixture[str], fake_brokers: list[FakeBroker]
) -> None:
    coordinator = FakeBroker(versions={DESCRIBE: (0, 0)}, answers={})
    calls: list[Request] = []

    def describe(request: Request) -> dict[str, Any]:
        calls.append(request)
        if len(calls) == 1:  # the first answer: still loading
            states = [{"transactional_id": i, "error_code": ErrorCode.coordinator_load_in_progress}
                      for i in request.body.transactional_ids]  # fmt: skip
            return {"throttle_time": 0, "transaction_states": states}
        return describe_answer(-1)

    coordinator.answers[DESCRIBE] = describe
    # FindCoordinator v3: one request per key, each answered at the top level.
    bootstrap = FakeBroker(
        versions={ApiKey.FIND_COORDINATOR: (0, 3)},
        answers={ApiKey.FIND_COORDINATOR: lambda request: node(5, coordinator)},
    )
    fake_brokers += [coordinator, bootstrap]
    code, out, err = run(capsys, bootstrap, "describe", "t0")
    assert (code, err) == (0, "")
    header, row = (line.split() for line in out.splitlines())
    assert dict(zip(header, row, strict=True)) == {
        "CoordinatorId": "5", "TransactionalId": "t0", "ProducerId": "0", "ProducerEpoch": "0",
        "TransactionState": "Empty", "TransactionTimeoutMs": "60000",
        "CurrentTransactionStartTimeMs": "-", "TransactionDurationMs": "-", "TopicPartitions": "-",
    }  # fmt: skip
    finds = bootstrap.asked(ApiKey.FIND_COORDINATOR)
    assert [(r.api_version, r.body.key, r.body.key_type) for r in finds] == [(3, "t0", 1)] * 2
    assert len(coordinator.asked(DESCRIBE)) == 2


def test_a_malformed_bootstrap_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["transactions", "list", "--bootstrap", "no-port"])
    assert (code, capsys.readouterr().err) == (
        2,
        "riverbed transactions: --bootstrap: not HOST:PORT: 'no-port'\n",
    )
