"""The topics of a classic group member's subscription (Kafka's ConsumerProtocol).

A classic member's metadata is opaque bytes, except that for protocol type ``consumer``
(every Kafka consumer's) it is ``ConsumerProtocolSubscription``: a version int16, then
``topics`` as an array of strings (int32 count, int16-length UTF-8 strings), then fields the
coordinator does not need (user data, owned partitions, ...). Versions 0-3 all start this
way. The coordinator reads only the topics, for OffsetDelete's
GROUP_SUBSCRIBED_TO_TOPIC check; everything else about the subscription stays opaque.
"""

from __future__ import annotations

import struct

__all__ = ["subscription_topics"]


def subscription_topics(metadata: bytes) -> list[str] | None:
    """The subscribed topics, or None if ``metadata`` is not a subscription we can read."""
    try:
        (version,) = struct.unpack_from(">h", metadata, 0)
        if version < 0:
            return None
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0 or count > len(metadata):
            return None
        pos = 6
        topics = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.append(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
