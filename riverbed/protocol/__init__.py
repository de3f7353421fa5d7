"""riverbed.protocol: the Kafka wire codec, sans-IO (h11 style).

It serves both sides of the wire, as h11 serves both HTTP roles. The broker's: bytes in,
typed requests out; responses in, bytes out. A client's: requests in, bytes out; bytes in,
typed responses out. No sockets, clocks, logging or environment: the broker and
``riverbed.client`` own all I/O. Built on kio 0.6.5 (pinned) for the message schemas.

- ``FrameReader`` splits a byte stream into request frames (``framing``).
- ``decode_request`` turns a frame into a ``Request`` with a kio body dataclass;
  ``encode_response`` turns a kio dataclass or a plain dict into a response frame (``codec``).
- ``request_body`` builds a kio request of any version, ``encode_request`` makes its frame
  and ``decode_response`` reads the answer's (``client_codec``).
- ``SUPPORTED_APIS`` / ``advertised_apis`` hold the version policy and its reasons
  (``versions``).

Exceptions (``errors``), by whose fault it is::

    ProtocolError                    base; nothing else ever escapes this package's readers
    ├── RemoteProtocolError          the peer sent bad bytes: close the connection
    │   ├── UnsupportedVersionError  readable header, but api_key/api_version not implemented;
    │   │                            carries api_key, api_version, correlation_id
    │   ├── FrameTooLargeError       size prefix above max_frame_bytes
    │   └── MalformedResponseError   (client side) a response frame that is not the answer
    │                                to the request asked
    └── LocalProtocolError           we tried to encode something invalid (our bug)
"""

from riverbed.protocol.client_codec import decode_response, encode_request, request_body
from riverbed.protocol.codec import (
    ErrorCode,
    Request,
    api_versions_body,
    decode_request,
    encode_response,
    encode_response_parts,
    encode_unsupported_version,
    milliseconds,
)
from riverbed.protocol.errors import (
    FrameTooLargeError,
    LocalProtocolError,
    MalformedResponseError,
    ProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from riverbed.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameReader
from riverbed.protocol.versions import (
    SUPPORTED_APIS,
    AdvertisedApi,
    ApiKey,
    VersionRange,
    advertised_apis,
)

__all__ = (
    "DEFAULT_MAX_FRAME_BYTES",
    "SUPPORTED_APIS",
    "AdvertisedApi",
    "ApiKey",
    "ErrorCode",
    "FrameReader",
    "FrameTooLargeError",
    "LocalProtocolError",
    "MalformedResponseError",
    "ProtocolError",
    "RemoteProtocolError",
    "Request",
    "UnsupportedVersionError",
    "VersionRange",
    "advertised_apis",
    "api_versions_body",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "encode_unsupported_version",
    "milliseconds",
    "request_body",
)
