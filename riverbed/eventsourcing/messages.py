"""Commands, events and results as the contract writes them (DESIGN.md, "Event sourcing").

    command  key {ID}          value {"command_id", "type", ID, "user_id",
                                      "expected_version" (int >= 0 or null), "data", "ts"}
    event    key {ID}          value {"event_id", ID, "user_id", "version", "type", "data",
                                      "command_id", "ts", "schema"}
    result   key {"command_id"} value {"command_id", ID, "status": "accepted"|"rejected",
                                      "version", "reason" (when rejected)}

``ID`` is the aggregate's id field (``cart_id`` for the shop's carts): a
:class:`StreamFormat` names it. Keys and values are compact JSON. Decoding checks every
field and raises :class:`~riverbed.eventsourcing.errors.MessageError` naming the first one
that is wrong, so a malformed command is answered (rejected) instead of stopping a processor.
Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from riverbed.eventsourcing.errors import MessageError

__all__ = [
    "Command",
    "Event",
    "Result",
    "StreamFormat",
    "count_field",
    "dumps",
    "loads",
    "loads_object",
    "maybe_text_field",
    "text_field",
]

ACCEPTED = "accepted"
REJECTED = "rejected"


def dumps(document: Any) -> bytes:
    """Compact UTF-8 JSON, as every topic of the contract holds it. orjson writes it several
    times faster than the json module (which encoding an event and a result took 11% of a
    processor's time, BENCHMARKS.md); what orjson refuses (an integer beyond 64 bits, a key
    that is not a string) the json module writes."""
    try:
        return orjson.dumps(document)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def loads(value: bytes) -> Any:
    """JSON read by orjson, or by the json module where orjson refuses it (an integer beyond
    64 bits, NaN), whose errors are the ones raised (``ValueError``)."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    command_id: str
    type: str
    aggregate_id: str
    user_id: str | None
    expected_version: int | None
    data: dict[str, Any]
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    event_id: str
    aggregate_id: str
    user_id: str | None
    version: int
    type: str
    data: dict[str, Any]
    command_id: str
    ts: int
    schema: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    command_id: str
    aggregate_id: str
    status: str
    version: int
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.status == ACCEPTED


EventParts = tuple[str, int, str, int, dict[str, Any], str | None, str]
"""An event's aggregate id, version, type, schema, data, user id and event id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamFormat:
    """The topics' formats for an aggregate whose id field is ``id_field``."""

    id_field: str

    def key(self, aggregate_id: str) -> bytes:
        return dumps({self.id_field: aggregate_id})

    def document(self, message: Command | Event | Result) -> dict[str, Any]:
        """``message`` as the contract's JSON object, in the contract's field order (a
        result without a reason has no ``reason``)."""
        # The fields read one by one: dataclasses.asdict deep-copies, and cost 6% of a
        # processor's time (BENCHMARKS.md); ``data`` is the message's own, not a copy.
        id_field = self.id_field
        return {
            (id_field if name == "aggregate_id" else name): value
            for name in message.__slots__
            if not ((value := getattr(message, name)) is None and name == "reason")
        }

    def encode_command(self, command: Command) -> tuple[bytes, bytes]:
        return self.key(command.aggregate_id), dumps(self.document(command))

    def decode_command(self, value: bytes | None) -> Command:
        fields = loads_object(value, "command")
        # As decode_event: a well-formed command at once, anything else field by field.
        try:
            command = Command(
                command_id=fields["command_id"],
                type=fields["type"],
                aggregate_id=fields[self.id_field],
                user_id=fields["user_id"],
                expected_version=fields["expected_version"],
                data=fields["data"],
                ts=fields["ts"],
            )
        except KeyError:
            pass
        else:
            expected = command.expected_version
            if (
                type(command.command_id) is str
                and command.command_id
                and type(command.type) is str
                and command.type
                and type(command.aggregate_id) is str
                and command.aggregate_id
                and (command.user_id is None or (type(command.user_id) is str and command.user_id))
                and (expected is None or (type(expected) is int and expected >= 0))
                and type(command.data) is dict
                and type(command.ts) is int
            ):
                return command
        return Command(
            command_id=text_field(fields, "command_id"),
            type=text_field(fields, "type"),
            aggregate_id=text_field(fields, self.id_field),
            user_id=maybe_text_field(fields, "user_id"),
            expected_version=maybe_count_field(fields, "expected_version"),
            data=_data(fields),
            ts=_integer(fields, "ts"),
        )

    def command_ids(self, value: bytes | None) -> tuple[str, str]:
        """The command id and aggregate id of a command record that may be malformed
        otherwise (to answer it), or a :class:`MessageError` if it has none."""
        fields = loads_object(value, "command")
        return text_field(fields, "command_id"), text_field(fields, self.id_field)

    def encode_event(self, event: Event) -> tuple[bytes, bytes]:
        return self.key(event.aggregate_id), dumps(self.document(event))

    def event_parts(self, fields: dict[str, Any]) -> EventParts | None:
        """What a replay needs of an event record's JSON object, checked at once, or None
        if it is not a valid event (:meth:`event_of` names its first wrong field): what a
        processor wrote passes. Replay reads every event, so this is one step: a field at a
        time cost 60% of it, and checking first and reading the fields again, 5%."""
        try:
            event_id, aggregate_id = fields["event_id"], fields[self.id_field]
            version, event_type, schema = fields["version"], fields["type"], fields["schema"]
            data, command_id, ts = fields["data"], fields["command_id"], fields["ts"]
        except KeyError:
            return None
        user_id = fields.get("user_id")
        if (
            type(event_id) is str
            and event_id != ""
            and type(aggregate_id) is str
            and aggregate_id != ""
            and (user_id is None or (type(user_id) is str and user_id != ""))
            and type(version) is int
            and version >= 1
            and type(event_type) is str
            and event_type != ""
            and type(data) is dict
            and type(command_id) is str
            and command_id != ""
            and type(ts) is int
            and type(schema) is int
            and schema >= 1
        ):
            return aggregate_id, version, event_type, schema, data, user_id, event_id
        return None

    def decode_event(self, value: bytes | None) -> Event:
        return self.event_of(loads_object(value, "event"))

    def event_of(self, fields: dict[str, Any]) -> Event:
        """The event an event record's JSON object holds, or a MessageError naming its
        first wrong field."""
        if self.event_parts(fields) is not None:
            return Event(
                event_id=fields["event_id"],
                aggregate_id=fields[self.id_field],
                user_id=fields.get("user_id"),  # missing: None, as the contract reads it
                version=fields["version"],
                type=fields["type"],
                data=fields["data"],
                command_id=fields["command_id"],
                ts=fields["ts"],
                schema=fields["schema"],
            )
        version = count_field(fields, "version")
        schema = count_field(fields, "schema")
        if version < 1 or schema < 1:
            raise MessageError(f"an event's version and schema start at 1: {version}, {schema}")
        return Event(
            event_id=text_field(fields, "event_id"),
            aggregate_id=text_field(fields, self.id_field),
            user_id=maybe_text_field(fields, "user_id"),
            version=version,
            type=text_field(fields, "type"),
            data=_data(fields),
            command_id=text_field(fields, "command_id"),
            ts=_integer(fields, "ts"),
            schema=schema,
        )

    def encode_result(self, result: Result) -> tuple[bytes, bytes]:
        return dumps({"command_id": result.command_id}), dumps(self.document(result))

    def decode_result(self, value: bytes | None) -> Result:
        fields = loads_object(value, "result")
        status = text_field(fields, "status")
        if status not in (ACCEPTED, REJECTED):
            raise MessageError(f"status must be {ACCEPTED!r} or {REJECTED!r}, not {status!r}")
        version = count_field(fields, "version")
        return Result(
            command_id=text_field(fields, "command_id"),
            aggregate_id=text_field(fields, self.id_field),
            status=status,
            version=version,
            reason=maybe_text_field(fields, "reason"),
        )


def loads_object(value: bytes | None, what: str) -> dict[str, Any]:
    try:
        # the usual case first: replay reads every event here (None: a JSONDecodeError)
        document = orjson.loads(value)  # type: ignore[arg-type]
    except orjson.JSONDecodeError:
        if value is None:
            raise MessageError(f"a {what} with no value (a tombstone)") from None
        try:
            document = loads(value)  # orjson again, then the json module where it refuses
        except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
            raise MessageError(f"a {what} that is not JSON: {e}") from None
    if type(document) is not dict:
        raise MessageError(f"a {what} must be a JSON object, not {type(document).__name__}")
    return document


def maybe_text_field(fields: dict[str, Any], name: str) -> str | None:
    return None if fields.get(name) is None else text_field(fields, name)


def text_field(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value:
        raise MessageError(f"{name!r} must be a non-empty string, not {value!r}")
    return value


def _integer(fields: dict[str, Any], name: str) -> int:
    value = fields.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MessageError(f"{name!r} must be an integer, not {value!r}")
    return value


def maybe_count_field(fields: dict[str, Any], name: str) -> int | None:
    return None if fields.get(name) is None else count_field(fields, name)


def count_field(fields: dict[str, Any], name: str) -> int:
    value = _integer(fields, name)
    if value < 0:
        raise MessageError(f"{name!r} must be 0 or more, not {value}")
    return value


def _data(fields: dict[str, Any]) -> dict[str, Any]:
    value = fields.get("data", {})
    if not isinstance(value, dict):
        raise MessageError(f"'data' must be a JSON object, not {value!r}")
    return value
