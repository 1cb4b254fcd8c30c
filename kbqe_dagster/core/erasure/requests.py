"""An erasure request: who asks (a request id), whose rows go (the subject id) and, optionally,
from which tables; read from a Kafka message of ``erasure.requests_topic`` or built by
``kbqe erase``. The subject never appears in a ``repr``, an error or the audit table: only its
salted hash (:func:`subject_hash`) does.

The message: key = the request id (UTF-8), value = a JSON object::

    {"subject": "u-42"}                                   # every table of erasure.tables
    {"subject": "u-42", "tables": ["shop.orders"]}        # only these (each must be covered)

``subject`` is a string or an integer (read as its decimal text); anything else, a missing
key, or a value that is not JSON refuses the message with a reason naming its topic,
partition and offset. A request id seen before is the same request: applying it again finds
nothing and says so.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.record.routing import allow_pattern_problem

MAX_REQUEST_ID = 256
"""Longest request id accepted (it names the request in the audit table and the logs)."""


class ErasureRequestError(KbqeError):
    """An erasure request that cannot be applied; the message names where it came from and
    never the subject."""


@dataclass(frozen=True)
class ErasureRequest:
    """One erasure request."""

    request_id: str
    subject: str = field(repr=False)
    """The subject id in clear: only ever a query parameter, never logged or recorded."""
    tables: tuple[str, ...] = ()
    """``dataset.table`` names the request is limited to; empty: every configured table."""
    source: str = "cli"
    """Where it came from: ``cli``, or ``kafka:<topic>/<partition>/<offset>``."""

    def __post_init__(self) -> None:
        if not self.request_id or len(self.request_id) > MAX_REQUEST_ID:
            raise ErasureRequestError(
                f"{self.source}: a request id has 1 to {MAX_REQUEST_ID} characters"
            )
        if not self.subject:
            raise ErasureRequestError(f"request {self.request_id} ({self.source}): empty subject")
        for table in self.tables:
            if "*" in table or allow_pattern_problem(table):
                raise ErasureRequestError(
                    f"request {self.request_id} ({self.source}): {table!r} is not 'dataset.table'"
                )


def parse_request_message(
    key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int
) -> ErasureRequest:
    """The request carried by one message of the requests topic."""
    where = f"kafka:{topic}/{partition}/{offset}"
    if not key:
        raise ErasureRequestError(f"{where}: no key: the key is the request id")
    try:
        request_id = key.decode("utf-8")
    except UnicodeDecodeError:
        raise ErasureRequestError(f"{where}: the key (request id) is not UTF-8") from None
    if value is None:
        raise ErasureRequestError(f"{where}: request {request_id} has no value")
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ErasureRequestError(f"{where}: request {request_id}: not JSON") from None
    if not isinstance(doc, dict) or "subject" not in doc:
        raise ErasureRequestError(
            f"{where}: request {request_id}: expected an object with a 'subject'"
        )
    unknown = sorted(set(doc) - {"subject", "tables"})
    if unknown:
        raise ErasureRequestError(f"{where}: request {request_id}: unknown key(s) {unknown}")
    subject = doc["subject"]
    if isinstance(subject, bool) or not isinstance(subject, (str, int)):
        raise ErasureRequestError(
            f"{where}: request {request_id}: 'subject' must be a string or an integer"
        )
    tables = doc.get("tables") or []
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise ErasureRequestError(
            f"{where}: request {request_id}: 'tables' must be a list of 'dataset.table'"
        )
    return ErasureRequest(request_id, str(subject), tuple(tables), where)


def request_message(request: ErasureRequest) -> tuple[bytes, bytes]:
    """The (key, value) of ``request`` on the requests topic (the inverse of
    :func:`parse_request_message`; for producers and tests)."""
    doc: dict[str, object] = {"subject": request.subject}
    if request.tables:
        doc["tables"] = list(request.tables)
    return request.request_id.encode(), json.dumps(doc).encode()


def subject_hash(subject: str, salt: str) -> str:
    """HMAC-SHA256 of the subject id under ``salt``, hex: what the audit table records. The
    same subject has the same hash under one salt, so an auditor holding the salt can
    answer "was subject X erased?" without the table ever holding X."""
    if not salt:
        raise ErasureRequestError(
            "the erasure salt is empty: set the variable erasure.salt_env names"
        )
    return hmac.new(salt.encode(), subject.encode(), hashlib.sha256).hexdigest()
