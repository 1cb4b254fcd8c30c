"""The Confluent wire format: magic byte, big-endian schema id, Avro body; typed rejections."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.errors import (
    BadInputError,
    BadMagicError,
    FrameTooShortError,
    InvalidSchemaIdError,
    TombstoneError,
    WireFormatError,
)
from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.record.wire import MAX_SCHEMA_ID, Frame, encode_frame, parse_frame


@pytest.mark.parametrize(
    "value, schema_id, body",
    [
        (b"\x00\x00\x00\x00\x07\x02hi", 7, b"\x02hi"),
        (b"\x00\x00\x00\x01\x00abc", 256, b"abc"),
        (b"\x00\x01\x02\x03\x04z", 0x01020304, b"z"),
        (b"\x00\x7f\xff\xff\xff\x00", MAX_SCHEMA_ID, b"\x00"),
        (b"\x00\x00\x00\x00\x00body", 0, b"body"),
    ],
)
def test_frame_splits_big_endian_schema_id_and_body(
    value: bytes, schema_id: int, body: bytes
) -> None:
    frame = parse_frame(value)
    assert frame.schema_id == schema_id
    assert bytes(frame.body) == body


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_frame_accepts_any_bytes_like_value(kind: type) -> None:
    frame = parse_frame(kind(b"\x00\x00\x00\x00\x2aXYZ"))
    assert frame == Frame(42, memoryview(b"XYZ"))


def test_body_is_a_zero_copy_view_of_the_value() -> None:
    value = bytearray(b"\x00\x00\x00\x00\x01abc")
    frame = parse_frame(value)
    value[5] = ord("Z")
    assert bytes(frame.body) == b"Zbc"


def test_five_byte_frame_is_well_formed_with_an_empty_body() -> None:
    # An empty body is valid Avro for a record with no fields; the decoder judges it.
    frame = parse_frame(b"\x00\x00\x00\x00\x09")
    assert frame.schema_id == 9
    assert bytes(frame.body) == b""


@pytest.mark.parametrize(
    "value, error, reason, message_part",
    [
        (None, TombstoneError, "tombstone", "null"),
        (b"", FrameTooShortError, "too_short", "0 byte(s)"),
        (b"\x00", FrameTooShortError, "too_short", "1 byte(s)"),
        (b"\x00\x00\x00\x07", FrameTooShortError, "too_short", "4 byte(s)"),
        (b"\x01\x00\x00\x00\x07body", BadMagicError, "bad_magic", "0x01"),
        (b'{"json": true}', BadMagicError, "bad_magic", "0x7b"),
        (b"\x00\x80\x00\x00\x00body", InvalidSchemaIdError, "unknown_schema_id", "0x80000000"),
        (b"\x00\xff\xff\xff\xffbody", InvalidSchemaIdError, "unknown_schema_id", "0xffffffff"),
    ],
)
def test_malformed_values_raise_typed_errors_with_stable_reasons(
    value: bytes | None, error: type[WireFormatError], reason: str, message_part: str
) -> None:
    with pytest.raises(error) as caught:
        parse_frame(value)
    assert caught.value.reason == reason
    assert isinstance(caught.value, BadInputError)
    assert message_part in str(caught.value)


def test_too_short_is_checked_before_the_magic_byte() -> None:
    with pytest.raises(FrameTooShortError):
        parse_frame(b"\x05\x00")


@pytest.mark.parametrize("schema_id", [0, 1, 4242, MAX_SCHEMA_ID])
def test_encode_then_parse_round_trips(schema_id: int) -> None:
    value = encode_frame(schema_id, b"\x06abc")
    assert value[:1] == b"\x00"
    frame = parse_frame(value)
    assert (frame.schema_id, bytes(frame.body)) == (schema_id, b"\x06abc")


@pytest.mark.parametrize("schema_id", [-1, MAX_SCHEMA_ID + 1])
def test_encode_refuses_ids_no_registry_can_hold(schema_id: int) -> None:
    with pytest.raises(ValueError, match=str(schema_id)):
        encode_frame(schema_id, b"")


def test_every_reason_is_a_distinct_stable_string() -> None:
    values = [reason.value for reason in Reason]
    assert len(values) == len(set(values))
    assert set(values) == {
        "tombstone",
        "too_short",
        "bad_magic",
        "unknown_schema_id",
        "non_avro_schema",
        "body_decode_error",
        "unsupported_schema",
        "missing_event_time",
        "invalid_event_time",
        "unroutable",
        "destination_not_allowed",
        "oversized",
        "not_a_change",
        "bad_key",
        "unconvertible_value",
        "json_decode_error",
        "json_schema_mismatch",
        "decoder_rejected",
        "transform_failed",
        "decoder_error",
        "decoder_schema_mismatch",
        "non_json_schema",
        "unmappable_json_schema",
        "protobuf_decode_error",
        "non_protobuf_schema",
        "unmappable_protobuf_schema",
        "storage_write_refused",
    }


def _leaf_subclasses(cls: type) -> list[type]:
    subs = cls.__subclasses__()
    return [cls] if not subs else [leaf for sub in subs for leaf in _leaf_subclasses(sub)]


def test_every_concrete_bad_input_error_reports_a_known_reason() -> None:
    leaves = _leaf_subclasses(BadInputError)
    assert len(leaves) >= 8
    for leaf in leaves:
        assert leaf.reason in set(Reason), f"{leaf.__name__}.reason = {leaf.reason!r}"
