"""The kernel's Storage Write rows (kernel/src/proto_rows.rs) are the Python encoder's, byte
for byte.

``encode_file`` is run on the same record file twice, with ``KBQE_STAGE_KERNEL=off`` (the
Python encoder, the reference) and on: the rows file, its counts and its unencodable records
must be identical, or both runs must fail with the same error. Each test also requires the
path it means to prove (the kernel wrote the file, or refused it and Python did), so equality
is never the trivial one of a kernel that refuses everything.

The seeded differential fuzz (rows_fuzz.py) runs a slice by default;
``--kernel-fuzz-cases 1000000`` runs a million records.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fastavro
import pytest

from kbqe_dagster.delivery.rows import encode_file
from kbqe_dagster.staging.avro_container import AvroContainerWriter
from kbqe_dagster.staging.native_kernel import NATIVE, PYTHON, SWITCH
from kbqe_dagster_tests.delivery.rows_fuzz import case
from kbqe_dagster_tests.staging.kernel_equality import fuzz_seeds

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)

RECORDS_PER_CASE = 100


def both(
    monkeypatch: pytest.MonkeyPatch,
    path: Path,
    schema: dict,
    skip: tuple[str, frozenset[int]] | None = None,
) -> tuple[tuple, tuple, str]:
    """(Python's outcome, the kernel run's outcome, the path the kernel run took)."""
    outcomes = []
    encoded_by = PYTHON
    for switch in ("off", "on"):
        monkeypatch.setenv(SWITCH, switch)
        try:
            out = encode_file(path, schema, "acme.orders [0, 9]", skip)
        except Exception as error:  # the reference's failure must be the kernel run's too
            outcomes.append(("error", type(error).__name__, str(error)))
            continue
        outcomes.append(("rows", out.rows, out.bytes, out.unencodable, out.path.read_bytes()))
        encoded_by = out.encoded_by
    return outcomes[0], outcomes[1], encoded_by


def write(tmp_path: Path, schema: dict, records: list[dict[str, Any]], name: str = "f") -> Path:
    parsed = fastavro.parse_schema(schema)
    path = tmp_path / f"{name}.avro"
    with open(path, "wb") as handle:
        writer = AvroContainerWriter(handle, schema, codec="snappy", block_records=3)
        for record in records:
            body = io.BytesIO()
            fastavro.schemaless_writer(body, parsed, record)
            writer.append(body.getvalue())
        writer.close()
    return path


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"]},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {
            "name": "ship",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Ship",
                    "fields": [
                        {"name": "city", "type": "string"},
                        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
                    ],
                },
            ],
        },
        {"name": "_kafka_offset", "type": "long"},
    ],
}


def order(i: int, **changes: Any) -> dict[str, Any]:
    import datetime as dt
    import decimal
    import uuid

    record = {
        "id": i, "customer": None if i % 3 == 0 else f"cüstomer {i} 🎉",
        "amount": decimal.Decimal(i * 101 - 500).scaleb(-2), "day": dt.date(2026, 11, 27),
        "at": dt.datetime(2026, 11, 27, 12, 0, i, tzinfo=dt.UTC), "tags": ["a", ""][: i % 3],
        "attrs": {"w": float(i), "nan": float("nan")}, "status": ["NEW", "PAID"][i % 2],
        "ship": None if i % 2 else {"city": "Zürich", "ref": uuid.UUID(int=i)},
        "_kafka_offset": 100 + i,
    }  # fmt: skip
    record.update(changes)
    return record


def test_the_kernel_writes_the_python_rows_of_an_order_file(tmp_path, monkeypatch):
    path = write(tmp_path, ORDER, [order(i) for i in range(10)])
    python, native, by = both(monkeypatch, path, ORDER)
    assert by == NATIVE
    assert python == native
    assert python[1] == 10


def test_rows_already_in_the_table_are_left_out_alike(tmp_path, monkeypatch):
    path = write(tmp_path, ORDER, [order(i) for i in range(10)])
    python, native, by = both(monkeypatch, path, ORDER, ("_kafka_offset", frozenset({101, 105})))
    assert by == NATIVE
    assert python == native
    assert python[1] == 8


def test_floats_of_every_kind_widen_alike(tmp_path, monkeypatch):
    """A producer's body is staged as it came, so a float may hold any 32 bits: signalling and
    quiet NaNs with payloads, infinities, subnormals and signed zeros widen to the same double
    on both paths (the hardware conversion CPython's reader uses)."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "f", "type": "float"}, {"name": "d", "type": "double"}]}  # fmt: skip
    patterns = [0x7F800001, 0x7FBFFFFF, 0xFF800001, 0x7FC00001, 0xFFFFFFFF, 0x7F800000,
                0x00000001, 0x80000000, 0x3F800000]  # fmt: skip
    path = tmp_path / "floats.avro"
    with open(path, "wb") as handle:
        writer = AvroContainerWriter(handle, schema, codec="null")
        for bits in patterns:
            double = (0x7FF0000000000001 + bits).to_bytes(8, "little")  # a NaN with a payload
            writer.append(bits.to_bytes(4, "little") + double)
        writer.close()
    python, native, by = both(monkeypatch, path, schema)
    assert by == NATIVE
    assert python == native
    assert python[1] == len(patterns)


def test_a_null_array_item_leaves_the_file_to_python(tmp_path, monkeypatch):
    """The Python encoder dead-letters that record (RowEncodeError); the kernel refuses the
    file, so the reasons are Python's."""
    path = write(tmp_path, ORDER, [order(0), order(1, tags=["x", None]), order(2)])
    python, native, by = both(monkeypatch, path, ORDER)
    assert by == PYTHON
    assert python == native
    assert [i for i, _ in python[3]] == [1]


def test_a_uuid_in_another_spelling_leaves_the_file_to_python(tmp_path, monkeypatch):
    raw = {**ORDER, "fields": [
        dict(f, type=["null", {"type": "record", "name": "Ship", "fields": [
            {"name": "city", "type": "string"}, {"name": "ref", "type": "string"}]}])
        if f["name"] == "ship" else f for f in ORDER["fields"]]}  # fmt: skip
    path = write(tmp_path, raw, [order(0, ship={"city": "x", "ref": "{" + "0" * 32 + "}"})])
    # The file's schema is the one with the uuid: what its writer declared.
    header_fixed = path.read_bytes().replace(
        b'{"name":"ref","type":"string"}', b'{"name":"ref","type":{"type":"string","logicalType":"uuid"}}'
    )  # fmt: skip
    path.write_bytes(header_fixed)
    python, native, by = both(monkeypatch, path, ORDER)
    assert by == PYTHON
    assert python == native


def test_a_schema_outside_the_mapping_fails_alike(tmp_path, monkeypatch):
    schema = {"type": "record", "name": "R", "fields": [{"name": "u", "type": ["string", "long"]}]}
    path = write(tmp_path, schema, [{"u": "a"}, {"u": 1}])
    python, native, by = both(monkeypatch, path, schema)
    assert python == native
    assert python[:2] == ("error", "UnsupportedSchemaError")


def test_the_switch_off_is_the_python_encoder(tmp_path, monkeypatch):
    path = write(tmp_path, ORDER, [order(1)])
    monkeypatch.setenv(SWITCH, "off")
    assert encode_file(path, ORDER, "acme.orders").encoded_by == PYTHON


def test_differential_fuzz(tmp_path, monkeypatch, pytestconfig):
    """Seeded random files of ``RECORDS_PER_CASE`` records, ``--kernel-fuzz-cases`` records in
    all: identical rows files, counts and failures."""
    seeds = fuzz_seeds(pytestconfig, RECORDS_PER_CASE)
    files = native_files = records = native_records = 0
    for seed in seeds:
        c = case(seed, RECORDS_PER_CASE)
        path = tmp_path / "case.avro"
        path.write_bytes(c.body)
        python, native, by = both(monkeypatch, path, c.schema)
        assert python == native, f"seed {seed}: the kernel's rows differ from Python's"
        files += 1
        records += c.records
        if by == NATIVE:
            native_files += 1
            native_records += c.records
    print(
        f"rows fuzz: {files} files, {records} records, {native_records} of them in "
        f"{native_files} files the kernel encoded, 0 disagreements"
    )
    # Some files are meant to be refused (values the reference refuses or converts
    # otherwise); most must have been the kernel's, or equality proves nothing.
    assert native_files > files * 0.6, "the kernel encoded too few files to prove anything"
