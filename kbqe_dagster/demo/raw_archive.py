"""``kbqe demo``'s raw archive: a few messages no decoder could stage (JSON text, bytes that
are not UTF-8, Avro framed with an id no registry knows, a tombstone) on ``com.acme.audit``,
a ``format: raw`` topic of examples/pipeline.yaml, staged in the demo's stage run and loaded
by its load run into ``acme_audit.events``; the demo then says what that table holds."""

from __future__ import annotations

from typing import Any

AUDIT_TOPIC = "com.acme.audit"
AUDIT_TABLE = "acme_audit.events"

AUDIT_VALUES: tuple[bytes | None, ...] = (
    b'{"action": "login", "user": "ada"}',
    b"\xff\xfe\x00\x80 not UTF-8",
    b"\x00\x00\x0f\x42\x3f\x02\x0cfoobar",  # framed Avro of schema id 999999
    None,  # a tombstone
)


def produce_audit_events(bootstrap_servers: str, run: int) -> int:
    """One of each :data:`AUDIT_VALUES` with a key and a header; returns how many."""
    from confluent_kafka import Producer

    from kbqe_dagster.demo.produce import ensure_topic
    from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

    ensure_topic(bootstrap_servers, AUDIT_TOPIC, 1)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "logger": CLIENT_LOG})
    for i, value in enumerate(AUDIT_VALUES):
        producer.produce(
            AUDIT_TOPIC, value, f"demo-{run}-{i}".encode(), headers=[("source", b"kbqe demo")]
        )
    if producer.flush(30):
        raise RuntimeError(f"could not produce the demo's audit messages to {AUDIT_TOPIC}")
    return len(AUDIT_VALUES)


def audit_line(client: Any) -> str:
    """What the raw archive holds, in one line of the demo's output."""
    rows = list(client.query(f"SELECT value FROM `{AUDIT_TABLE}`").result())
    tombstones = sum(1 for r in rows if r["value"] is None)
    not_utf8 = sum(1 for r in rows if r["value"] is not None and not _utf8(r["value"]))
    return (
        f"      raw archive {AUDIT_TABLE} ({AUDIT_TOPIC}, format: raw): {len(rows)} message(s) "
        f"kept as bytes with key and headers, {tombstones} tombstone(s), {not_utf8} not UTF-8"
    )


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
