"""The exceptions of ``riverbed.protocol``; see the package docstring for the hierarchy."""

from __future__ import annotations

__all__ = (
    "FrameTooLargeError",
    "LocalProtocolError",
    "MalformedResponseError",
    "ProtocolError",
    "RemoteProtocolError",
    "UnsupportedVersionError",
)


class ProtocolError(Exception):
    """Base of every error this package raises on purpose."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not a valid request (or, to a client, not a valid
    response): its fault, not ours."""


class UnsupportedVersionError(RemoteProtocolError):
    """The header was readable, but the API key or its version is not one we implement.

    The broker answers an ApiVersions request with an ApiVersions v0 response carrying
    ``UNSUPPORTED_VERSION`` (KIP-511, see ``encode_unsupported_version``) and closes the
    connection for every other API, as Apache Kafka does.
    """

    def __init__(self, *, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class FrameTooLargeError(RemoteProtocolError):
    """A size prefix announced more than ``max_frame_bytes`` (Kafka's socket.request.max.bytes)."""

    def __init__(self, *, size: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {max_frame_bytes} bytes")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class MalformedResponseError(RemoteProtocolError):
    """A response frame that cannot be read as the answer to the request it answers (see
    ``client_codec``): the broker's fault, or a broker speaking another version than it
    advertised."""


class LocalProtocolError(ProtocolError):
    """We tried to encode something the protocol cannot carry: a bug on our side."""
