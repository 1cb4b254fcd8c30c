"""The FIX 4.4 example decoder (examples/fix/decoder.py): frame, BodyLength and CheckSum are
checked, NewOrderSingle and ExecutionReport become records of their own schemas, and every
refusal says precisely why."""

from __future__ import annotations

from datetime import UTC, datetime

import fastavro
import pytest

from examples.fix.decoder import SCHEMAS, decode_fix, parse_fix
from examples.fix.messages import bad_messages, fix_message, order_flow, readable
from kbqe_dagster import DecodeError, RawMessage

TS = "20240913-14:30:00.123"
ORDER = [
    (35, "D"),
    (49, "BUY"),
    (56, "SELL"),
    (34, 7),
    (52, TS),
    (11, "C1"),
    (55, "AAPL"),
    (54, "2"),
    (38, 300),
    (40, 2),
    (44, "187.25"),
    (60, TS),
]


def decode(value: bytes):
    return decode_fix(RawMessage(value, None, (), None, "fix.orders", 0, 0))


def test_the_generator_frames_a_published_fix_message_byte_for_byte() -> None:
    # The logon message quoted in FIX guides, with its BodyLength 65 and CheckSum 062.
    message = fix_message(
        [
            (35, "A"),
            (49, "SERVER"),
            (56, "CLIENT"),
            (34, 177),
            (52, "20090107-18:15:16"),
            (98, 0),
            (108, 30),
        ],
        begin_string="FIX.4.2",
    )
    assert readable(message) == (
        "8=FIX.4.2|9=65|35=A|49=SERVER|56=CLIENT|34=177|52=20090107-18:15:16|98=0|108=30|10=062|"
    )


def test_a_new_order_single_becomes_a_record_of_its_schema() -> None:
    record, schema = decode(fix_message(ORDER))
    assert schema is SCHEMAS["D"] and schema["name"] == "NewOrderSingle"
    assert record == {
        "msg_type": "D",
        "sender_comp_id": "BUY",
        "target_comp_id": "SELL",
        "msg_seq_num": 7,
        "sending_time": datetime(2024, 9, 13, 14, 30, 0, 123000, tzinfo=UTC),
        "cl_ord_id": "C1",
        "symbol": "AAPL",
        "side": "2",
        "order_qty": 300.0,
        "ord_type": "2",
        "price": 187.25,
        "transact_time": datetime(2024, 9, 13, 14, 30, 0, 123000, tzinfo=UTC),
    }
    assert fastavro.validate(record, fastavro.parse_schema(schema))


def test_an_execution_report_keeps_optional_tags_null_and_seconds_only_timestamps() -> None:
    record, schema = decode(
        fix_message(
            [
                (35, "8"),
                (49, "SELL"),
                (56, "BUY"),
                (34, 8),
                (52, "20240913-14:30:01"),
                (37, "O1"),
                (17, "E1"),
                (150, "0"),
                (39, "0"),
                (55, "AAPL"),
                (54, "1"),
                (14, 0),
                (151, 300),
                (6, 0),
            ]
        )
    )
    assert schema["name"] == "ExecutionReport"
    assert record["sending_time"] == datetime(2024, 9, 13, 14, 30, 1, tzinfo=UTC)
    assert record["cl_ord_id"] is None and record["transact_time"] is None
    assert record["last_px"] is None and record["leaves_qty"] == 300.0
    assert fastavro.validate(record, fastavro.parse_schema(schema))


def test_the_order_flow_decodes_into_orders_then_two_reports_each() -> None:
    names = [decode(s.value)[1]["name"] for s in order_flow(3)]
    assert names == ["NewOrderSingle", "ExecutionReport", "ExecutionReport"] * 3


@pytest.mark.parametrize("sample", bad_messages(), ids=lambda s: s.expect[:24])
def test_each_bad_sample_is_refused_with_its_reason(sample) -> None:
    with pytest.raises(DecodeError, match=None) as caught:
        decode(sample.value)
    assert sample.expect in str(caught.value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (fix_message(ORDER)[:-1], "does not end with SOH"),
        (fix_message(ORDER).replace(b"AAPL", b"\xc3\xa9PL"), "byte 75 is not ASCII"),
        (b"8=FIX.4.4\x019=5\x0135=D\x01garbage\x0110=000\x01", "not a FIX field at byte 19"),
        (b"9=5\x018=FIX.4.4\x0135=D\x0110=000\x01", "starts with tags 9, 8, 35"),
        (fix_message(ORDER + [(55, "MSFT")]), "tag 55 repeated"),
        (
            fix_message([(t, "abc" if t == 38 else v) for t, v in ORDER]),
            "OrderQty 38='abc' is not a Qty",
        ),
        (
            fix_message([(t, "nan" if t == 44 else v) for t, v in ORDER]),
            "Price 44='nan' is not a Price: not a finite number",
        ),
        (
            fix_message([(t, "20240913-25:00:00" if t == 60 else v) for t, v in ORDER]),
            "TransactTime 60='20240913-25:00:00' is not a UTCTimestamp",
        ),
    ],
)
def test_malformed_fix_is_refused_naming_what_and_where(value: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode(value)
    assert reason in str(caught.value)


def test_body_length_and_checksum_are_both_checked() -> None:
    good = fix_message(ORDER)
    assert parse_fix(good)[10] == good[-4:-1].decode()
    shorter = good.replace(b"\x0111=C1\x01", b"\x0111=C\x01")  # one byte less, old framing
    with pytest.raises(DecodeError, match=r"BodyLength 9=\d+ but the body is \d+ bytes"):
        parse_fix(shorter)
