"""A FIX 4.4 decoder for ``format: decoder`` topics: ``decoder: examples.fix.decoder:decode_fix``.

A FIX message is ``tag=value`` fields, each ended by SOH (``\\x01``), framed by three fields:
BeginString ``8=FIX.4.4`` first, BodyLength ``9`` second (the bytes from the field after it
through the SOH before the CheckSum), CheckSum ``10`` last (the sum of every byte before it,
modulo 256, three digits). Anything that breaks the frame, the length or the checksum is
refused with :class:`kbqe_dagster.DecodeError` naming what and where, so it lands in the dead
letters as ``decoder_rejected`` with that reason.

Two message types become records, each with its own Avro schema (and so its own table under
``schema_name`` routing): NewOrderSingle (``35=D``) → ``fix.NewOrderSingle``, ExecutionReport
(``35=8``) → ``fix.ExecutionReport``. Any other MsgType is refused. Fields are named after
their FIX tag names in snake case; coded fields (Side, OrdType, ExecType, OrdStatus) keep
their FIX code (``54=1`` → ``side: "1"``); quantities and prices are doubles; UTCTimestamps
(``YYYYMMDD-HH:MM:SS[.sss]``) are ``timestamp-millis``, so TransactTime (60) can be the
event time. Tags this example does not map are not kept (the raw message is, in Kafka); a
repeated tag (a repeating group) is refused rather than half-read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kbqe_dagster import DecodeError, RawMessage

SOH = b"\x01"
BEGIN_STRING = "FIX.4.4"

_TIMESTAMP = {"type": "long", "logicalType": "timestamp-millis"}


_UTC_TIMESTAMP = re.compile(r"(\d{4})(\d{2})(\d{2})-(\d{2}):(\d{2}):(\d{2})(?:\.(\d{3}))?")


def _parse_timestamp(text: str) -> datetime:
    # UTCTimestamp: YYYYMMDD-HH:MM:SS or YYYYMMDD-HH:MM:SS.sss (FIX 4.4, milliseconds). A
    # regular expression and datetime() instead of strptime: a third of the decoder's time.
    match = _UTC_TIMESTAMP.fullmatch(text)
    if match is None:
        raise ValueError("not YYYYMMDD-HH:MM:SS[.sss]")
    year, month, day, hour, minute, second, millis = match.groups()
    return datetime(
        int(year),
        int(month),
        int(day),
        int(hour),
        int(minute),
        int(second),
        int(millis or 0) * 1000,
        tzinfo=UTC,
    )


def _parse_number(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):  # FIX numbers are finite
        raise ValueError("not a finite number")
    return value


# FIX type → (Avro type, parser of the field's text).
_KINDS: dict[str, tuple[Any, Callable[[str], Any]]] = {
    "String": ("string", str),
    "SeqNum": ("long", int),
    "Qty": ("double", _parse_number),
    "Price": ("double", _parse_number),
    "UTCTimestamp": (_TIMESTAMP, _parse_timestamp),
}

# (tag, FIX name, column, FIX type, required)
_HEADER = (
    (49, "SenderCompID", "sender_comp_id", "String", True),
    (56, "TargetCompID", "target_comp_id", "String", True),
    (34, "MsgSeqNum", "msg_seq_num", "SeqNum", True),
    (52, "SendingTime", "sending_time", "UTCTimestamp", True),
)
_BODIES = {
    "D": (
        "NewOrderSingle",
        (
            (11, "ClOrdID", "cl_ord_id", "String", True),
            (55, "Symbol", "symbol", "String", True),
            (54, "Side", "side", "String", True),
            (38, "OrderQty", "order_qty", "Qty", True),
            (40, "OrdType", "ord_type", "String", True),
            (44, "Price", "price", "Price", False),
            (60, "TransactTime", "transact_time", "UTCTimestamp", True),
        ),
    ),
    "8": (
        "ExecutionReport",
        (
            (37, "OrderID", "order_id", "String", True),
            (11, "ClOrdID", "cl_ord_id", "String", False),
            (17, "ExecID", "exec_id", "String", True),
            (150, "ExecType", "exec_type", "String", True),
            (39, "OrdStatus", "ord_status", "String", True),
            (55, "Symbol", "symbol", "String", True),
            (54, "Side", "side", "String", True),
            (32, "LastQty", "last_qty", "Qty", False),
            (31, "LastPx", "last_px", "Price", False),
            (14, "CumQty", "cum_qty", "Qty", True),
            (151, "LeavesQty", "leaves_qty", "Qty", True),
            (6, "AvgPx", "avg_px", "Price", True),
            (60, "TransactTime", "transact_time", "UTCTimestamp", False),
        ),
    ),
}


def _schema(name: str, fields: tuple) -> dict:
    columns = [{"name": "msg_type", "type": "string"}]
    for tag, fix_name, column, kind, required in _HEADER + fields:
        avro = _KINDS[kind][0]
        doc = f"FIX tag {tag} {fix_name}"
        if required:
            columns.append({"name": column, "type": avro, "doc": doc})
        else:
            columns.append({"name": column, "type": ["null", avro], "default": None, "doc": doc})
    return {"type": "record", "name": name, "namespace": "fix", "fields": columns}


SCHEMAS = {msg_type: _schema(name, fields) for msg_type, (name, fields) in _BODIES.items()}
"""MsgType → the Avro record schema of its rows (constants: the stager derives each once)."""


def decode_fix(message: RawMessage) -> tuple[dict[str, Any], dict]:
    """The record and schema of one FIX 4.4 NewOrderSingle or ExecutionReport."""
    fields = parse_fix(message.value)
    msg_type = fields.get(35)
    if msg_type not in _BODIES:
        raise DecodeError(
            f"MsgType 35={msg_type} is not decoded: only 35=D (NewOrderSingle) "
            "and 35=8 (ExecutionReport)"
        )
    name, body = _BODIES[msg_type]
    record: dict[str, Any] = {"msg_type": msg_type}
    for tag, fix_name, column, kind, required in _HEADER + body:
        text = fields.get(tag)
        if text is None:
            if required:
                raise DecodeError(f"{name} without required tag {tag} ({fix_name})")
            record[column] = None
            continue
        try:
            record[column] = _KINDS[kind][1](text)
        except ValueError as error:
            raise DecodeError(f"{fix_name} {tag}={text!r} is not a {kind}: {error}") from None
    return record, SCHEMAS[msg_type]


def parse_fix(value: bytes) -> dict[int, str]:
    """Tag → value of a FIX 4.4 message whose frame, BodyLength and CheckSum are right."""
    if not value.endswith(SOH):
        raise DecodeError("not a FIX message: it does not end with SOH (\\x01)")
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError as error:
        raise DecodeError(f"not a FIX message: byte {error.start} is not ASCII") from None
    pairs: list[tuple[int, str]] = []
    position = 0
    for raw in text[:-1].split("\x01"):
        tag, sep, field_value = raw.partition("=")
        if not sep or not tag.isdigit() or not field_value:
            raise DecodeError(
                f"not a FIX field at byte {position}: {raw[:40]!r} (expected tag=value)"
            )
        pairs.append((int(tag), field_value))
        position += len(raw) + 1
    if len(pairs) < 4 or [tag for tag, _ in pairs[:3]] != [8, 9, 35] or pairs[-1][0] != 10:
        order = ", ".join(str(tag) for tag, _ in pairs[:3])
        raise DecodeError(
            f"not a FIX message: starts with tags {order} and ends with tag "
            f"{pairs[-1][0]}; expected 8, 9, 35 first and 10 last"
        )
    if pairs[0][1] != BEGIN_STRING:
        raise DecodeError(f"BeginString 8={pairs[0][1]}, expected 8={BEGIN_STRING}")
    _check_body_length(value, pairs[1][1])
    _check_checksum(value, pairs[-1][1])
    fields: dict[int, str] = {}
    for tag, field_value in pairs:
        if tag in fields:
            raise DecodeError(f"tag {tag} repeated: repeating groups are not decoded")
        fields[tag] = field_value
    return fields


def _check_body_length(value: bytes, declared: str) -> None:
    # From the byte after BodyLength's SOH through the SOH before "10=".
    start = value.index(SOH, value.index(SOH) + 1) + 1
    end = value.rindex(SOH, 0, len(value) - 1) + 1
    if not declared.isdigit() or int(declared) != end - start:
        raise DecodeError(f"BodyLength 9={declared} but the body is {end - start} bytes")


def _check_checksum(value: bytes, declared: str) -> None:
    end = value.rindex(SOH, 0, len(value) - 1) + 1
    actual = sum(value[:end]) % 256
    if len(declared) != 3 or not declared.isdigit() or int(declared) != actual:
        raise DecodeError(f"CheckSum 10={declared} but the bytes before it sum to {actual:03d}")
