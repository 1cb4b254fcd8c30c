"""Erasure requests from the requests topic: the documented JSON value, refusals naming the
message (never the subject), and the salted hash the audit table records."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from kbqe_dagster.core.erasure.requests import (
    ErasureRequest,
    ErasureRequestError,
    parse_request_message,
    request_message,
    subject_hash,
)


def parse(key: bytes | None, value: object) -> ErasureRequest:
    raw = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
    return parse_request_message(key, raw, "gdpr", 2, 17)


def test_a_request_carries_its_id_subject_tables_and_origin() -> None:
    request = parse(b"req-1", {"subject": "u-42", "tables": ["shop.orders"]})
    assert request == ErasureRequest("req-1", "u-42", ("shop.orders",), "kafka:gdpr/2/17")


def test_an_integer_subject_is_its_decimal_text_and_tables_are_optional() -> None:
    assert parse(b"r", {"subject": 42}) == ErasureRequest("r", "42", (), "kafka:gdpr/2/17")


def test_the_subject_never_shows_in_a_repr() -> None:
    assert "u-42" not in repr(parse(b"r", {"subject": "u-42"}))


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, {"subject": "u-42"}, "no key"),
        (b"\xff", {"subject": "u-42"}, "not UTF-8"),
        (b"r", None, "has no value"),
        (b"r", b"{not json", "not JSON"),
        (b"r", ["u-42"], "expected an object with a 'subject'"),
        (b"r", {"subject": True}, "must be a string or an integer"),
        (b"r", {"subject": ""}, "empty subject"),
        (b"r", {"subject": "u-42", "tables": "shop.orders"}, "'tables' must be a list"),
        (b"r", {"subject": "u-42", "tables": ["shop.*"]}, "is not 'dataset.table'"),
        (b"r", {"subject": "u-42", "scope": []}, "unknown key(s) ['scope']"),
    ],
)
def test_a_bad_message_is_refused_naming_where_it_is(key, value, reason) -> None:
    with pytest.raises(ErasureRequestError) as error:
        parse(key, value)
    assert "gdpr/2/17" in str(error.value) and reason in str(error.value)
    assert "u-42" not in str(error.value)


def test_a_message_round_trips() -> None:
    request = ErasureRequest("r-9", "u-42", ("a.b",), "kafka:gdpr/2/17")
    assert parse_request_message(*request_message(request), "gdpr", 2, 17) == request


def test_the_subject_hash_is_hmac_sha256_under_the_salt() -> None:
    expected = hmac.new(b"salt", b"u-42", hashlib.sha256).hexdigest()
    assert subject_hash("u-42", "salt") == expected
    assert subject_hash("u-42", "other") != expected
    with pytest.raises(ErasureRequestError, match="salt is empty"):
        subject_hash("u-42", "")
