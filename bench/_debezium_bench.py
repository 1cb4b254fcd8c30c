"""The Debezium variant of the stage benchmark (``bench_stage.py --debezium``): the same
16-field order row, wrapped in Debezium's envelope (before/after/source/op/ts_ms/transaction)
as its Avro converter writes it; a third of the changes are updates that carry both images,
like a real table's stream. The stage job cuts the row image out of each envelope
(keyed/changes.py), so its work per message is the envelope's validation plus a slice.

``--debezium-postgres`` (variant ``postgres``) stages instead the envelope the real Postgres
connector registered for a table of 24 column types (``dbz_avro.public.all_types-value`` in
kbqe_dagster_tests/corpus/debezium_postgres/avro/schemas.json: Connect Decimal, Debezium's
VariableScaleDecimal, dates, times, ZonedTime, ZonedTimestamp, intervals, uuid, json, bytea,
an enum, arrays of nullable items), with values like the corpus's: its ``numeric`` and
``timestamptz`` columns are re-encoded on both stage paths (core/formats/connect_types.py)."""

from __future__ import annotations

import copy
import io
import json
import random
from pathlib import Path

import fastavro
from bench_hot_path import SCHEMA, make_record

NAMESPACE = "bench.inventory.orders"
CORPUS = (
    Path(__file__).resolve().parent.parent
    / "kbqe_dagster_tests/corpus/debezium_postgres/avro/schemas.json"
)
POSTGRES_SUBJECT = "dbz_avro.public.all_types-value"
VARIANTS = ("orders", "postgres")
"""The envelopes: the bench's 16-field order row, or the real Postgres connector's table."""
KEY_FIELD = {"orders": "eventId", "postgres": "id"}


def variant_schema(variant: str) -> dict:
    """The envelope schema of ``variant``."""
    if variant == "postgres":
        return json.loads(CORPUS.read_text())["subjects"][POSTGRES_SUBJECT]["schema"]
    return envelope_schema()


def envelope_schema() -> dict:
    row = copy.deepcopy(SCHEMA)
    row.update({"name": "Value", "namespace": NAMESPACE})
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "db", "type": "string"},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": ["null", "long"], "default": None},
            {"name": "lsn", "type": ["null", "long"], "default": None},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": NAMESPACE,
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", "string"], "default": None},
        ],
    }


def build_envelopes(count: int, unique: int, seed: int, variant: str = "orders") -> list[bytes]:
    if variant == "postgres":
        return build_postgres_envelopes(count, unique, seed)
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(envelope_schema())
    distinct = []
    ts = 1_726_238_205_123
    for i in range(min(unique, count)):
        ts += rng.randint(0, 5)
        after = make_record(rng)
        update = i % 3 == 0
        record = {
            "before": make_record(rng) if update else None,
            "after": after,
            "source": {
                "version": "2.7.0.Final",
                "connector": "postgresql",
                "name": "bench",
                "ts_ms": ts,
                "db": "shop",
                "schema": "public",
                "table": "orders",
                "txId": 1000 + i,
                "lsn": 10_000_000 + i,
            },
            "op": "u" if update else "c",
            "ts_ms": ts + 2,
            "transaction": None,
        }
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        distinct.append(out.getvalue())
    return [distinct[i % len(distinct)] for i in range(count)]


def postgres_row(rng: random.Random, i: int) -> dict:
    """A row of the corpus's ``all_types`` table with values as Debezium writes them: a few
    columns null, the ``numeric`` of no scale at scales 0-6, ``timestamptz`` as UTC text
    with 0-6 fraction digits (Debezium's ZonedTimestamp spelling)."""
    micros = 1_726_238_205_123_456 + rng.randrange(10**12)
    seconds, fraction = divmod(micros, 1_000_000)
    instant = _utc(seconds)
    places = rng.choice([6, 6, 6, 3, 0])
    text = instant + ("." + f"{fraction:06d}"[:places] if places else "") + "Z"
    scale = rng.randint(0, 6)
    unscaled = rng.randrange(-(10**12), 10**12)
    maybe = lambda value: None if rng.random() < 0.05 else value  # noqa: E731
    return {
        "id": i,
        "c_smallint": maybe(rng.randint(-32768, 32767)),
        "c_int": maybe(rng.randint(-(2**31), 2**31 - 1)),
        "c_bigint": maybe(rng.randint(-(2**63), 2**63 - 1)),
        "c_numeric": maybe(_unscaled_bytes(rng.randrange(-(10**10), 10**10))),
        "c_numeric_any": maybe({"scale": scale, "value": _unscaled_bytes(unscaled)}),
        "c_real": maybe(rng.choice([1.5, -0.25, 3.0e8])),
        "c_double": maybe(rng.random() * 1e6),
        "c_bool": maybe(rng.random() < 0.5),
        "c_text": maybe(f"order note {rng.randrange(10**6)} for customer"),
        "c_varchar": maybe(f"sku-{rng.randrange(10**8):08d}"),
        "c_char": maybe(rng.choice(["abc", "xyz", "eur"])),
        "c_date": maybe(19_000 + rng.randrange(2_000)),
        "c_time": maybe(rng.randrange(86_400_000_000)),
        "c_timetz": maybe(f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:45.123456Z"),
        "c_timestamp": maybe(micros),
        "c_timestamptz": maybe(text),
        "c_interval": maybe(rng.randrange(10**12)),
        "c_uuid": maybe(str(uuid_of(rng))),
        "c_json": maybe('{"a": 1, "b": [true, null]}'),
        "c_jsonb": maybe('{"k": "v", "n": 1.5}'),
        "c_bytea": maybe(rng.randbytes(rng.randint(0, 16))),
        "c_enum": maybe(rng.choice(["sad", "ok", "happy"])),
        "c_int_array": maybe([rng.randint(0, 100), None, 7][: rng.randint(0, 3)]),
        "c_text_array": maybe(["x", None, "y z"][: rng.randint(0, 3)]),
    }


def _unscaled_bytes(unscaled: int) -> bytes:
    """Two's complement big-endian, as Java's ``BigInteger.toByteArray`` (Debezium's) and
    fastavro write it (they differ only at -2**(8k-1): Java's is a byte shorter)."""
    return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)


def uuid_of(rng: random.Random) -> str:
    import uuid

    return str(uuid.UUID(int=rng.getrandbits(128)))


def _utc(seconds: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def build_postgres_envelopes(count: int, unique: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(variant_schema("postgres"))
    distinct = []
    ts = 1_726_238_205_123
    for i in range(min(unique, count)):
        ts += rng.randint(0, 5)
        update = i % 3 == 0
        record = {
            "before": postgres_row(rng, i) if update else None,
            "after": postgres_row(rng, i),
            "source": {
                "version": "3.6.1.Final", "connector": "postgresql", "name": "dbz_avro",
                "ts_ms": ts, "snapshot": "false", "db": "kbqe", "sequence": None,
                "ts_us": ts * 1000, "ts_ns": ts * 1_000_000, "schema": "public",
                "table": "all_types", "txId": 1000 + i, "lsn": 10_000_000 + i, "xmin": None,
                "origin": None, "origin_lsn": None,
            },
            "transaction": None,
            "op": "u" if update else "c",
            "ts_ms": ts + 2,
            "ts_us": (ts + 2) * 1000,
            "ts_ns": (ts + 2) * 1_000_000,
        }  # fmt: skip
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        distinct.append(out.getvalue())
    return [distinct[i % len(distinct)] for i in range(count)]
