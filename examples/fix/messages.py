"""Sample FIX 4.4 messages: a generator with correct BodyLength and CheckSum, an order flow of
NewOrderSingle and ExecutionReport messages, and a few bad messages, each with the reason the
decoder gives it (``examples/fix/decoder.py``)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

SOH = "\x01"
SENDER, TARGET = "BUYSIDE", "SELLSIDE"
SYMBOLS = ("AAPL", "MSFT", "GOOG", "AMZN", "NVDA")


def fix_message(fields: Sequence[tuple[int, object]], begin_string: str = "FIX.4.4") -> bytes:
    """``8=…|9=…|<fields>|10=…|`` with SOH separators; BodyLength and CheckSum computed.
    ``fields`` start with MsgType (35)."""
    body = "".join(f"{tag}={value}{SOH}" for tag, value in fields)
    head = f"8={begin_string}{SOH}9={len(body.encode('ascii'))}{SOH}"
    checksum = sum((head + body).encode("ascii")) % 256
    return f"{head}{body}10={checksum:03d}{SOH}".encode("ascii")


def utc_timestamp(when: datetime) -> str:
    """FIX UTCTimestamp with milliseconds: ``YYYYMMDD-HH:MM:SS.sss``."""
    return when.strftime("%Y%m%d-%H:%M:%S.") + f"{when.microsecond // 1000:03d}"


class Sample(NamedTuple):
    value: bytes
    msg_type: str  # "D", "8", or what a bad message claims
    expect: str  # "staged", or the decoder's rejection reason (a fragment of it)


def order_flow(orders: int, seed: int = 44,
               start: datetime = datetime(2024, 9, 13, 14, 30, tzinfo=UTC)) -> Iterator[Sample]:  # fmt: skip
    """``orders`` NewOrderSingles, each followed by an ExecutionReport that acknowledges it
    (ExecType 0, New) and one that fills it (ExecType F, Trade): three messages per order."""
    rng = random.Random(seed)
    seq = 0
    for n in range(orders):
        when = start + timedelta(milliseconds=250 * n)
        symbol, side = rng.choice(SYMBOLS), rng.choice("12")
        qty, price = rng.randint(1, 50) * 100, round(rng.uniform(50, 500), 2)
        cl_ord_id, order_id = f"C{n:06d}", f"O{n:06d}"
        seq += 1
        yield Sample(
            fix_message(
                [
                    (35, "D"),
                    (49, SENDER),
                    (56, TARGET),
                    (34, seq),
                    (52, utc_timestamp(when)),
                    (11, cl_ord_id),
                    (55, symbol),
                    (54, side),
                    (38, qty),
                    (40, 2),
                    (44, price),
                    (60, utc_timestamp(when)),
                ]
            ),
            "D",
            "staged",
        )
        for exec_n, (exec_type, status, last_qty, cum, leaves) in enumerate(
            (("0", "0", 0, 0, qty), ("F", "2", qty, qty, 0))
        ):
            seq += 1
            at = when + timedelta(milliseconds=5 * (exec_n + 1))
            yield Sample(
                fix_message(
                    [
                        (35, "8"),
                        (49, TARGET),
                        (56, SENDER),
                        (34, seq),
                        (52, utc_timestamp(at)),
                        (37, order_id),
                        (11, cl_ord_id),
                        (17, f"E{n:06d}-{exec_n}"),
                        (150, exec_type),
                        (39, status),
                        (55, symbol),
                        (54, side),
                        (32, last_qty),
                        (31, price if last_qty else 0),
                        (14, cum),
                        (151, leaves),
                        (6, price if cum else 0),
                        (60, utc_timestamp(at)),
                    ]
                ),
                "8",
                "staged",
            )


def bad_messages(when: datetime = datetime(2024, 9, 13, 15, 0, tzinfo=UTC)) -> list[Sample]:
    """One message per way the decoder refuses FIX (``expect`` is a fragment of its reason)."""
    ts = utc_timestamp(when)
    order = [
        (35, "D"),
        (49, SENDER),
        (56, TARGET),
        (34, 900),
        (52, ts),
        (11, "BAD1"),
        (55, "AAPL"),
        (54, "1"),
        (38, 100),
        (40, 1),
        (60, ts),
    ]
    good = fix_message(order)
    wrong_sum = good[:-4] + f"{(int(good[-4:-1]) + 1) % 256:03d}".encode() + b"\x01"
    wrong_length = good.replace(b"\x019=", b"\x019=1", 1)
    wrong_length = _with_checksum(wrong_length)
    return [
        Sample(wrong_sum, "D", "CheckSum 10="),
        Sample(wrong_length, "D", "BodyLength 9="),
        Sample(
            fix_message([(35, "0"), (49, SENDER), (56, TARGET), (34, 901), (52, ts)]),
            "0",
            "MsgType 35=0 is not decoded",
        ),
        Sample(fix_message(order, begin_string="FIX.4.2"), "D", "BeginString 8=FIX.4.2"),
        Sample(
            fix_message([f for f in order if f[0] != 55]), "D", "without required tag 55 (Symbol)"
        ),
        Sample(
            fix_message([(t, "13/09/2024" if t == 60 else v) for t, v in order]),
            "D",
            "TransactTime 60='13/09/2024' is not a UTCTimestamp",
        ),
        Sample(b'{"not": "fix"}', "?", "does not end with SOH"),
    ]


def _with_checksum(message: bytes) -> bytes:
    """``message`` with its CheckSum recomputed (so only the other defect remains)."""
    end = message.rindex(b"\x01", 0, len(message) - 1) + 1
    return message[:end] + f"10={sum(message[:end]) % 256:03d}\x01".encode()


def readable(message: bytes) -> str:
    """``8=FIX.4.4|9=…|`` for printing: SOH shown as ``|``."""
    return message.decode("ascii", "replace").replace(SOH, "|")
