"""The exceptions of ``riverbed.client``; see the package docstring for the hierarchy."""

from __future__ import annotations

__all__ = (
    "BrokerUnreachableError",
    "ClientError",
    "ErrorResponseError",
    "InvalidAddressError",
    "RequestFailedError",
    "UnsupportedApiError",
    "UnsupportedFilterError",
)


class ClientError(Exception):
    """Base of every error this package raises on purpose."""


class InvalidAddressError(ClientError, ValueError):
    """Not ``HOST:PORT``, or a bootstrap list without one; a ``ValueError`` as well, as
    Python's own parsers raise for text they cannot read."""


class UnsupportedApiError(ClientError):
    """The broker serves no version of ``api_key`` in ``lowest..highest``."""

    def __init__(self, api_key: int, *, lowest: int, highest: int, served: str) -> None:
        wanted = f"v{lowest}" if lowest == highest else f"v{lowest}-{highest}"
        api = _api_name(api_key)
        super().__init__(f"{api} {wanted} is not served (the broker serves {served})")
        self.api_key = api_key


class BrokerUnreachableError(ClientError):
    """No broker of the bootstrap list accepted a connection within the connect timeout."""

    def __init__(self, *, bootstrap: str, timeout_s: float, reason: str) -> None:
        super().__init__(f"no broker reachable at {bootstrap} within {timeout_s:g} s: {reason}")
        self.bootstrap = bootstrap


class RequestFailedError(ClientError):
    """A request to the broker at ``address`` got no answer that can be used: the broker
    serves no version of the API, its answer is unreadable, it did not answer in time, or
    the connection failed. The message says which; ``__cause__`` is the original error."""

    def __init__(self, message: str, *, address: str) -> None:
        super().__init__(message)
        self.address = address


class ErrorResponseError(ClientError):
    """A broker answered with an error code that retrying does not cure."""

    def __init__(self, message: str, *, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


class UnsupportedFilterError(ClientError):
    """A filter of a listing needs a newer version of the request than a broker serves
    (``ListTransactions`` filters by duration from v1, by pattern from v2).

    ``filter_name`` is the filter's field (``ListFilters.pattern``); ``shortfall`` says the
    rest ("needs ListTransactions v2; broker 1 (HOST:PORT) serves up to v1"), so that a tool
    can name the filter by its own flag."""

    def __init__(self, *, filter_name: str, shortfall: str) -> None:
        super().__init__(f"the {filter_name} filter {shortfall}")
        self.filter_name = filter_name
        self.shortfall = shortfall


def _api_name(api_key: int) -> str:
    """Kafka's name of an API: ``ListTransactions`` for 66."""
    from riverbed.protocol import ApiKey  # here: riverbed.protocol loads kio, 0.15 s

    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"API {api_key}"
