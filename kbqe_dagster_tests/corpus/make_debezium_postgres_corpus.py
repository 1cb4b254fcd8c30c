"""Capture real Debezium PostgreSQL change events into ``corpus/debezium_postgres/``: one table
with a column of each common PostgreSQL type, the same changes captured by two connectors,
one writing Avro through the local Apicurio registry (Confluent framing), one writing
JsonConverter JSON with embedded schemas.

Needs the local stack with PostgreSQL and Kafka Connect (``kbqe stack up postgres connect``)
and psycopg. Run from the repository root:

    KBQE_LOCAL_HOME=... python -m kbqe_dagster_tests.corpus.make_debezium_postgres_corpus

It replaces the table, the connectors, their topics and subjects, so a second run captures
the same events afresh (only random values, timestamps and LSNs differ).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import random
import string
import struct
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import fastavro
import psycopg
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from kbqe_dagster.localstack.cdc import ConnectClient, debezium_postgres_config
from kbqe_dagster.localstack.endpoints import LocalEndpoints, local_endpoints
from kbqe_dagster.localstack.postgres import DATABASE, PASSWORD, USER

OUT = Path(__file__).parent / "debezium_postgres"
TABLE = "all_types"
SCHEMA = "public"

DDL = [
    f"DROP TABLE IF EXISTS {TABLE}",
    "DROP TYPE IF EXISTS mood",
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    f"""CREATE TABLE {TABLE} (
    id integer PRIMARY KEY,
    c_smallint smallint,
    c_int integer,
    c_bigint bigint,
    c_numeric numeric(10, 2),
    c_numeric_any numeric,
    c_real real,
    c_double double precision,
    c_bool boolean,
    c_text text,
    c_varchar varchar(20),
    c_char char(3),
    c_date date,
    c_time time,
    c_timetz timetz,
    c_timestamp timestamp,
    c_timestamptz timestamptz,
    c_interval interval,
    c_uuid uuid,
    c_json json,
    c_jsonb jsonb,
    c_bytea bytea,
    c_enum mood,
    c_int_array integer[],
    c_text_array text[]
)""",
]

ROW_1 = f"""INSERT INTO {TABLE} VALUES (
    1, -32768, 2147483647, 9223372036854775807, 12345678.91, 3.14159265358979323846264338,
    1.5, 2.718281828459045, true, 'snapshot row', 'varchar value', 'abc',
    '2024-02-29', '13:45:56.123456', '13:45:56.123456+02', '2024-02-29 13:45:56.123456',
    '2024-02-29 13:45:56.123456+02', '1 year 2 mons 3 days 04:05:06.789',
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{{"a": 1, "b": [true, null]}}',
    '{{"k": "v", "n": 1.5}}', '\\xdeadbeef00', 'happy', '{{1,2,NULL,4}}',
    '{{"x","y z",NULL}}')"""
ROW_2 = f"""INSERT INTO {TABLE} VALUES (
    2, 1, -1, -9223372036854775808, -0.01, -123456789012345678901234567890.123456789,
    -0.0, 1e308, false, 'inserted row', '', 'xy', '0001-01-01', '00:00:00',
    '23:59:59.999999-11', '1970-01-01 00:00:00', '2262-04-11 23:47:16.854775+00',
    '-3 days -00:00:01', '00000000-0000-0000-0000-000000000000', '[]', '{{}}', '\\x',
    'sad', '{{}}', '{{}}')"""
ROW_3_NULLS = f"INSERT INTO {TABLE} (id) VALUES (3)"
UPDATE_2 = (
    f"UPDATE {TABLE} SET c_int = 42, c_text = 'updated row', c_numeric = 99.99, "
    f"c_enum = 'ok' WHERE id = 2"
)
TOAST_INSERT = f"INSERT INTO {TABLE} (id, c_int, c_text) VALUES (4, 0, %s)"
TOAST_UPDATE = f"UPDATE {TABLE} SET c_int = 1 WHERE id = 4"
DELETE_2 = f"DELETE FROM {TABLE} WHERE id = 2"
PK_UPDATE = f"UPDATE {TABLE} SET id = 30 WHERE id = 3"
TRUNCATE = f"TRUNCATE {TABLE}"

# (label, op) of each message in topic order; a tombstone has op None and no value.
EXPECTED = [
    ("snapshot_read", "r"),
    ("insert", "c"),
    ("insert_nulls", "c"),
    ("update", "u"),
    ("toast_insert", "c"),
    ("toast_update_unchanged_toasted_text", "u"),
    ("delete", "d"),
    ("delete_tombstone", None),
    ("pk_update_delete_old_key", "d"),
    ("pk_update_tombstone_old_key", None),
    ("pk_update_create_new_key", "c"),
    ("truncate", "t"),
]


def connector_configs(endpoints: LocalEndpoints) -> dict[str, dict[str, str]]:
    overrides = {"skipped.operations": "none"}  # truncates are skipped by default
    return {
        "avro": debezium_postgres_config(
            endpoints, "dbz_avro", "corpus_avro", [f"{SCHEMA}.{TABLE}"], "avro", overrides
        ),
        "json": debezium_postgres_config(
            endpoints, "dbz_json", "corpus_json", [f"{SCHEMA}.{TABLE}"], "json", overrides
        ),
    }


def topic(prefix: str) -> str:
    return f"{prefix}.{SCHEMA}.{TABLE}"


def incompressible_text(size: int) -> str:
    """Random letters and digits: pglz finds no repeats, so the value stays > 8 KB and is
    stored out of line (TOASTed), not compressed inline."""
    rng = random.SystemRandom()
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(size))


def main() -> None:
    endpoints = local_endpoints()
    client = ConnectClient(endpoints.connect_url)
    configs = connector_configs(endpoints)
    dsn = (
        f"host=127.0.0.1 port={endpoints.postgres_port} user={USER} password={PASSWORD} "
        f"dbname={DATABASE}"
    )
    for name in configs:
        client.delete(f"corpus-{name}")
    for name in configs:
        client.wait_deleted(f"corpus-{name}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for slot in ("corpus_avro", "corpus_json"):
            _drop_slot(conn, slot)
            conn.execute(f"DROP PUBLICATION IF EXISTS {slot}_publication")
        for statement in DDL:
            conn.execute(statement)
        conn.execute(ROW_1)
    _reset_topics_and_subjects(endpoints, [topic("dbz_avro"), topic("dbz_json")])

    for name, config in configs.items():
        client.put(f"corpus-{name}", config)
    for name in configs:
        client.wait_running(f"corpus-{name}")
    _consume(endpoints, topic("dbz_avro"), 1)
    _consume(endpoints, topic("dbz_json"), 1)

    toast_text = incompressible_text(10_000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROW_2)
        conn.execute(ROW_3_NULLS)
        conn.execute(UPDATE_2)
        conn.execute(TOAST_INSERT, (toast_text,))
        stored = conn.execute(f"SELECT pg_column_size(c_text) FROM {TABLE} WHERE id = 4").fetchone()
        conn.execute(TOAST_UPDATE)
        conn.execute(DELETE_2)
        conn.execute(PK_UPDATE)
        conn.execute(TRUNCATE)
    print(f"TOASTed text: 10000 characters, stored as {stored[0] if stored else '?'} bytes")

    avro = _consume(endpoints, topic("dbz_avro"), len(EXPECTED))
    js = _consume(endpoints, topic("dbz_json"), len(EXPECTED))
    OUT.mkdir(exist_ok=True)
    for name, config in configs.items():
        _write(OUT / f"connector-{name}.json", {"name": f"corpus-{name}", "config": config})
    (OUT / "statements.sql").write_text(
        ";\n\n".join(
            [
                *DDL,
                ROW_1,
                "-- connectors registered here (snapshot of row 1)",
                ROW_2,
                ROW_3_NULLS,
                UPDATE_2,
                TOAST_INSERT.replace("%s", "'<10000 random letters and digits>'"),
                TOAST_UPDATE,
                DELETE_2,
                PK_UPDATE,
                TRUNCATE,
            ]
        )
        + ";\n"
    )
    _write_avro(endpoints, avro)
    _write_json(js)
    for name in configs:
        client.delete(f"corpus-{name}")
    print(f"wrote {OUT}")


def _drop_slot(conn: psycopg.Connection, slot: str) -> None:
    for _ in range(60):
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is None:
            return
        if not row[0]:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        time.sleep(1)
    raise RuntimeError(f"replication slot {slot} stays active")


def _reset_topics_and_subjects(endpoints: LocalEndpoints, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [t for t in topics if t in existing]
    if doomed:
        for future in admin.delete_topics(doomed).values():
            future.result()
        while set(admin.list_topics(timeout=10).topics) & set(doomed):
            time.sleep(0.5)
    for t in topics:
        for kind in ("key", "value"):
            for permanent in ("false", "true"):
                url = f"{endpoints.registry_url}/subjects/{t}-{kind}?permanent={permanent}"
                try:
                    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"))
                except OSError:
                    pass


def _consume(endpoints: LocalEndpoints, name: str, count: int, timeout: float = 120.0) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "group.id": f"corpus-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    deadline = time.monotonic() + timeout
    messages: list = []
    try:
        while time.monotonic() < deadline:
            if name in consumer.list_topics(timeout=5).topics:
                break
            time.sleep(1)
        consumer.subscribe([name])
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            messages.append(msg)
    finally:
        consumer.close()
    if len(messages) < count:
        raise RuntimeError(f"{name}: {len(messages)} of {count} messages after {timeout}s")
    return messages


def _registry_schema(endpoints: LocalEndpoints, schema_id: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"{endpoints.registry_url}/schemas/ids/{schema_id}") as resp:
        return json.loads(resp.read())


def _subject(endpoints: LocalEndpoints, subject: str) -> dict[str, Any]:
    with urllib.request.urlopen(
        f"{endpoints.registry_url}/subjects/{subject}/versions/latest"
    ) as r:
        body = json.loads(r.read())
    body["schema"] = json.loads(body["schema"])
    return body


def _framed(raw: bytes | None) -> tuple[int | None, bytes]:
    if raw is None:
        return None, b""
    magic, schema_id = struct.unpack(">bI", raw[:5])
    if magic != 0:
        raise RuntimeError(f"not Confluent framing: first byte {magic}")
    return schema_id, raw[5:]


def _plain(value: Any) -> Any:
    """fastavro's decoded values as JSON: Decimal as text, bytes as base64, dates ISO."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, (dt.date, dt.time, dt.datetime)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _labels(ops: list[str | None]) -> list[str]:
    expected = [op for _, op in EXPECTED]
    if ops != expected:
        raise RuntimeError(f"events {ops} differ from the expected {expected}")
    return [label for label, _ in EXPECTED]


def _write_avro(endpoints: LocalEndpoints, messages: list) -> None:
    schemas: dict[int, Any] = {}
    rows = []
    ops = []
    for msg in messages:
        key_id, key_body = _framed(msg.key())
        value_id, value_body = _framed(msg.value())
        decoded = {}
        for part, schema_id, body in (("key", key_id, key_body), ("value", value_id, value_body)):
            if schema_id is None:
                decoded[part] = None
                continue
            if schema_id not in schemas:
                schemas[schema_id] = json.loads(_registry_schema(endpoints, schema_id)["schema"])
            parsed = fastavro.parse_schema(schemas[schema_id])
            decoded[part] = fastavro.schemaless_reader(io.BytesIO(body), parsed, parsed)
        ops.append(decoded["value"]["op"] if decoded["value"] else None)
        rows.append(
            {
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key_schema_id": key_id,
                "value_schema_id": value_id,
                "key_hex": msg.key().hex() if msg.key() is not None else None,
                "value_hex": msg.value().hex() if msg.value() is not None else None,
                "key_decoded": _plain(decoded["key"]),
                "value_decoded": _plain(decoded["value"]),
            }
        )
    labels = _labels(ops)
    out = OUT / "avro"
    out.mkdir(exist_ok=True)
    _write(out / "messages.json", [{"label": lb, **row} for lb, row in zip(labels, rows)])
    t = topic("dbz_avro")
    _write(
        out / "schemas.json",
        {
            "subjects": {s: _subject(endpoints, s) for s in (f"{t}-key", f"{t}-value")},
            "by_id": {str(i): s for i, s in sorted(schemas.items())},
        },
    )


def _write_json(messages: list) -> None:
    rows = []
    ops = []
    for msg in messages:
        key = json.loads(msg.key()) if msg.key() is not None else None
        value = json.loads(msg.value()) if msg.value() is not None else None
        ops.append(value["payload"]["op"] if value else None)
        rows.append(
            {"partition": msg.partition(), "offset": msg.offset(), "key": key, "value": value}
        )
    labels = _labels(ops)
    out = OUT / "json"
    out.mkdir(exist_ok=True)
    _write(out / "messages.json", [{"label": lb, **row} for lb, row in zip(labels, rows)])


def _write(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content, indent=2, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
