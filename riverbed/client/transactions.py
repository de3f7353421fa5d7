"""Transaction admin: ListTransactions and DescribeTransactions, answered with plain values.

confluent-kafka's AdminClient has no transaction API, so these go over riverbed's own
connections (``connection``), the way Kafka's admin client sends them:

- ``list_transactions``: Metadata for the brokers, then ListTransactions to every broker
  (each lists the transactional ids it coordinates);
- ``describe_transactions``: FindCoordinator (key type "transaction") for each id, then
  DescribeTransactions to each id's coordinator.

Versions are the highest both sides speak. A coordinator that is loading or moving
(COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) is asked again
until the request timeout, as Kafka's admin client retries them. Anything else that goes
wrong on the way is one ``ClientError`` (``errors``): ``BrokerUnreachableError`` (no broker
of the bootstrap list answered), ``InvalidAddressError`` (a malformed bootstrap list),
``RequestFailedError`` (no usable answer from one broker: an API it lacks, an unreadable
answer, a timeout, a failed connection), ``ErrorResponseError`` (a broker refused to list its
transactions) or ``UnsupportedFilterError`` (a filter the broker's version lacks), each
message one line naming the broker (or the bootstrap list). ``describe_transactions``
answers an id's own error (TRANSACTIONAL_ID_NOT_FOUND, ...) as its ``ErrorCode`` instead.

A ``TransactionAdmin`` blocks the calling thread and is for one thread at a time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Self

from kio.schema.errors import ErrorCode

from riverbed.client.connection import BrokerConnection, connect
from riverbed.client.errors import (
    BrokerUnreachableError,
    ErrorResponseError,
    RequestFailedError,
    UnsupportedApiError,
    UnsupportedFilterError,
)
from riverbed.protocol import ApiKey, MalformedResponseError, milliseconds, request_body

__all__ = (
    "ListFilters",
    "ListResult",
    "TransactionAdmin",
    "TransactionDescription",
    "TransactionListing",
    "error_name",
)

# The versions this client speaks, lowest and highest. Not Metadata v0 (an empty topic list
# asks for every topic) nor FindCoordinator v0 (no key type): Kafka serves v1 since 0.10/0.11,
# and Kafka 4 no longer serves v0.
VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.METADATA: (1, 12),
    ApiKey.FIND_COORDINATOR: (1, 4),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
}
KEY_TYPE_TRANSACTION = 1  # FindCoordinator's key type for transactional ids
RETRIABLE = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)
_FIRST_RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms (100), doubled per attempt
_MAX_RETRY_BACKOFF_S = 1.0  # Kafka's retry.backoff.max.ms (1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionListing:
    """One row of ListTransactions: an id its coordinator knows, and its state."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ListFilters:
    """ListTransactions' filters; empty (or None) ones match everything."""

    states: Sequence[str] = ()
    producer_ids: Sequence[int] = ()
    min_duration_ms: int = -1  # only transactions open this long; needs ListTransactions v1
    pattern: str | None = None  # a regular expression ids match; needs ListTransactions v2

    def needed(self) -> tuple[int, str]:
        """The lowest ListTransactions version that has these filters, and the name of the
        filter that needs it."""
        if self.pattern is not None:
            return 2, "pattern"
        return (1, "min_duration_ms") if self.min_duration_ms >= 0 else (0, "")


@dataclass(frozen=True, slots=True, kw_only=True)
class ListResult:
    listings: list[TransactionListing]
    unknown_states: list[str] = field(default_factory=list)  # state filters no broker knew


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionDescription:
    """DescribeTransactions' answer for one id (Kafka's TransactionDescription)."""

    transactional_id: str
    coordinator_id: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int | None  # when its current (or last) transaction started; None: none yet
    partitions: tuple[tuple[str, int], ...]  # of the open transaction


@dataclass(frozen=True, slots=True)
class _Node:
    node_id: int
    address: str


class TransactionAdmin:
    """Connections to the brokers of one cluster, opened as needed and closed together."""

    def __init__(
        self, bootstrap: str, *, connect_timeout_s: float, request_timeout_s: float
    ) -> None:
        self.bootstrap = bootstrap
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._connections: dict[str, BrokerConnection] = {}
        self._bootstrap: BrokerConnection | None = None

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        self._bootstrap = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- ListTransactions -------------------------------------------------------------------

    def list_transactions(self, filters: ListFilters) -> ListResult:
        listings: list[TransactionListing] = []
        unknown: dict[str, None] = {}
        for node in self._brokers():
            with self._talking_to(node.address) as connection:
                version = _version(connection, ApiKey.LIST_TRANSACTIONS)
                needed, filter_name = filters.needed()
                if version < needed:
                    raise UnsupportedFilterError(
                        filter_name=filter_name,
                        shortfall=f"needs ListTransactions v{needed}; broker {node.node_id} "
                        f"({node.address}) serves up to v{version}",
                    )
                body = request_body(
                    ApiKey.LIST_TRANSACTIONS,
                    version,
                    state_filters=tuple(filters.states),
                    producer_id_filters=tuple(filters.producer_ids),
                    duration_filter=filters.min_duration_ms,
                    transactional_id_pattern=filters.pattern,
                )
                backoff = _Backoff(self.request_timeout_s)
                answer = connection.request(ApiKey.LIST_TRANSACTIONS, version, body)
                while answer.error_code in RETRIABLE and not backoff.expired():
                    backoff.wait()
                    answer = connection.request(ApiKey.LIST_TRANSACTIONS, version, body)
            if answer.error_code != ErrorCode.none:
                raise ErrorResponseError(
                    f"broker {node.node_id} ({node.address}) did not list its transactions: "
                    f"{error_name(answer.error_code)}",
                    error_code=answer.error_code,
                )
            unknown.update(dict.fromkeys(answer.unknown_state_filters))
            listings += [
                TransactionListing(
                    transactional_id=state.transactional_id,
                    coordinator_id=node.node_id,
                    producer_id=state.producer_id,
                    state=state.transaction_state,
                )
                for state in answer.transaction_states
            ]
        listings.sort(key=lambda listing: listing.transactional_id)
        return ListResult(listings=listings, unknown_states=list(unknown))

    def _brokers(self) -> list[_Node]:
        """Every broker of the cluster (Metadata for no topics)."""
        connection = self._connect_bootstrap()
        with self._talking_to(self.bootstrap, connection):
            version = _version(connection, ApiKey.METADATA)
            body = request_body(
                ApiKey.METADATA,
                version,
                topics=(),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            answer = connection.request(ApiKey.METADATA, version, body)
        brokers = [_Node(b.node_id, _address(b.host, b.port)) for b in answer.brokers]
        return sorted(brokers, key=lambda node: node.node_id)

    # --- DescribeTransactions ---------------------------------------------------------------

    def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> dict[str, TransactionDescription | ErrorCode]:
        """Each id's description, or the error its coordinator answered (after retries)."""
        unique = list(dict.fromkeys(transactional_ids))
        results: dict[str, TransactionDescription | ErrorCode] = {}
        backoff = _Backoff(self.request_timeout_s)
        pending = unique
        while True:
            by_node: dict[_Node, list[str]] = {}
            for transactional_id, coordinator in self._find_coordinators(pending).items():
                if isinstance(coordinator, _Node):
                    by_node.setdefault(coordinator, []).append(transactional_id)
                else:
                    results[transactional_id] = coordinator
            for node, ids in by_node.items():
                results.update(self._describe_at(node, ids))
            pending = [i for i in pending if _retriable(results[i])]
            if not pending or backoff.expired():
                return {transactional_id: results[transactional_id] for transactional_id in unique}
            backoff.wait()

    def _find_coordinators(self, transactional_ids: list[str]) -> dict[str, _Node | ErrorCode]:
        """FindCoordinator: each id's coordinator, or the error answered for it."""
        connection = self._connect_bootstrap()
        with self._talking_to(self.bootstrap, connection):
            version = _version(connection, ApiKey.FIND_COORDINATOR)
            if version >= 4:  # KIP-699: one request for every key
                body = request_body(
                    ApiKey.FIND_COORDINATOR,
                    version,
                    key_type=KEY_TYPE_TRANSACTION,
                    coordinator_keys=tuple(transactional_ids),
                )
                answers = connection.request(ApiKey.FIND_COORDINATOR, version, body).coordinators
                by_key = {answer.key: answer for answer in answers}
            else:
                by_key = {}
                for key in transactional_ids:
                    body = request_body(
                        ApiKey.FIND_COORDINATOR, version, key=key, key_type=KEY_TYPE_TRANSACTION
                    )
                    by_key[key] = connection.request(ApiKey.FIND_COORDINATOR, version, body)
        found: dict[str, _Node | ErrorCode] = {}
        for key in transactional_ids:
            answer = by_key.get(key)
            if answer is None:
                found[key] = ErrorCode.coordinator_not_available  # left unanswered: ask again
            elif answer.error_code != ErrorCode.none:
                found[key] = answer.error_code
            else:
                found[key] = _Node(answer.node_id, _address(answer.host, answer.port))
        return found

    def _describe_at(
        self, node: _Node, transactional_ids: list[str]
    ) -> dict[str, TransactionDescription | ErrorCode]:
        """DescribeTransactions of ids whose coordinator is ``node``."""
        with self._talking_to(node.address) as connection:
            version = _version(connection, ApiKey.DESCRIBE_TRANSACTIONS)
            body = request_body(
                ApiKey.DESCRIBE_TRANSACTIONS, version, transactional_ids=tuple(transactional_ids)
            )
            answer = connection.request(ApiKey.DESCRIBE_TRANSACTIONS, version, body)
        # An id left out of the answer is asked again, as a coordinator that moved.
        described: dict[str, TransactionDescription | ErrorCode] = dict.fromkeys(
            transactional_ids, ErrorCode.not_coordinator
        )
        for state in answer.transaction_states:
            if state.error_code != ErrorCode.none:
                described[state.transactional_id] = state.error_code
                continue
            start = state.transaction_start_time  # None for Kafka's -1 (see client_codec)
            described[state.transactional_id] = TransactionDescription(
                transactional_id=state.transactional_id,
                coordinator_id=node.node_id,
                producer_id=state.producer_id,
                producer_epoch=state.producer_epoch,
                state=state.transaction_state,
                timeout_ms=milliseconds(state.transaction_timeout),
                start_ms=None if start is None else round(start.timestamp() * 1000),
                partitions=tuple((t.topic, p) for t in state.topics for p in t.partitions),
            )
        return described

    # --- connections ------------------------------------------------------------------------

    def _connect_bootstrap(self) -> BrokerConnection:
        if self._bootstrap is None:
            try:
                self._bootstrap = connect(
                    self.bootstrap,
                    connect_timeout_s=self.connect_timeout_s,
                    request_timeout_s=self.request_timeout_s,
                )
            except OSError as e:
                raise BrokerUnreachableError(
                    bootstrap=self.bootstrap, timeout_s=self.connect_timeout_s, reason=_reason(e)
                ) from e
            host, port = self._bootstrap.sock.getpeername()[:2]
            self._connections[_address(host, port)] = self._bootstrap
        return self._bootstrap

    def _connection(self, address: str) -> BrokerConnection:
        if address not in self._connections:
            self._connections[address] = BrokerConnection.open(
                address, timeout_s=self.request_timeout_s
            )
        return self._connections[address]

    @contextlib.contextmanager
    def _talking_to(
        self, address: str, connection: BrokerConnection | None = None
    ) -> Iterator[BrokerConnection]:
        """The connection to ``address``; what fails on it becomes one ``RequestFailedError``."""
        try:
            yield connection if connection is not None else self._connection(address)
        except UnsupportedApiError as e:
            raise RequestFailedError(
                f"the broker at {address} cannot answer: {e}", address=address
            ) from e
        except MalformedResponseError as e:
            raise RequestFailedError(
                f"the broker at {address} answered something unreadable: {e}", address=address
            ) from e
        except TimeoutError as e:
            raise RequestFailedError(
                f"no answer from the broker at {address} within {self.request_timeout_s:g} s",
                address=address,
            ) from e
        except OSError as e:
            raise RequestFailedError(
                f"cannot talk to the broker at {address}: {_reason(e)}", address=address
            ) from e


class _Backoff:
    """Waits between attempts at a retriable error, until ``timeout_s`` from its creation."""

    def __init__(self, timeout_s: float) -> None:
        self._deadline = time.monotonic() + timeout_s
        self._delay_s = _FIRST_RETRY_BACKOFF_S

    def expired(self) -> bool:
        return time.monotonic() >= self._deadline

    def wait(self) -> None:
        time.sleep(min(self._delay_s, max(0.0, self._deadline - time.monotonic())))
        self._delay_s = min(self._delay_s * 2, _MAX_RETRY_BACKOFF_S)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _reason(error: OSError) -> str:
    """``Connection refused`` rather than ``[Errno 111] Connection refused``."""
    return error.strerror or str(error) or type(error).__name__


def _retriable(answer: TransactionDescription | ErrorCode) -> bool:
    return isinstance(answer, ErrorCode) and answer in RETRIABLE


def _version(connection: BrokerConnection, api_key: ApiKey) -> int:
    lowest, highest = VERSIONS[api_key]
    return connection.version(api_key, lowest=lowest, highest=highest)


def error_name(code: ErrorCode) -> str:
    """Kafka's name of an error code: TRANSACTIONAL_ID_NOT_FOUND."""
    return code.name.upper()
