"""The container writer turns raw record bytes into Avro object container files that fastavro
(and DuckDB's avro-c based reader, as the BigQuery emulator uses) read back identically, with
at most one block of records in memory."""

from __future__ import annotations

import datetime as dt
import io
import pathlib
import tracemalloc
import zlib

import fastavro
import pytest
from cramjam import snappy

from kbqe_dagster.core.record.enrichment import (
    EnrichmentConfig,
    EnrichmentEncoder,
    extended_schema,
    schema_json,
)
from kbqe_dagster.staging.avro_container import CODECS, AvroContainerWriter

UTC = dt.UTC
V1 = {
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
CONFIG = EnrichmentConfig(key_column="_key", headers_column="_headers")


def record(i: int, version: dict) -> dict:
    value = {
        "id": f"o-{i}", "at": dt.datetime(2024, 9, 13, 12, 0, i % 60, tzinfo=UTC), "day": dt.date(2024, 9, 13),
        "amount": __import__("decimal").Decimal(i).scaleb(-2), "note": None if i % 2 else "gift ✓",
    }  # fmt: skip
    if version is V2:
        value["channel"] = "app"
    return value


def body(value: dict, schema: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def enrichment(i: int) -> dict:
    return {"_event_date": dt.date(2024, 9, 13), "_kafka_topic": "com.acme.orders", "_kafka_partition": 3,
            "_kafka_offset": 1000 + i, "_kafka_timestamp": dt.datetime(2024, 9, 13, 12, 0, 1, tzinfo=UTC),
            "_key": f"k{i}".encode(), "_headers": [{"key": "h", "value": None}]}  # fmt: skip


def write(sink, schema: dict, codec: str, count: int, **options):
    encoder = EnrichmentEncoder(CONFIG, "com.acme.orders", 3)
    writer = AvroContainerWriter(sink, extended_schema(schema, CONFIG), codec, **options)
    for i in range(count):
        prefix = encoder.encode(19979, 1000 + i, 1_726_228_801_000, f"k{i}".encode(), [("h", None)])
        writer.append(prefix, body(record(i, schema), schema))
    return writer.close()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("schema", [V1, V2], ids=["v1", "v2"])
def test_fastavro_reads_back_every_record_with_its_enrichment(codec, schema):
    sink = io.BytesIO()
    stats = write(sink, schema, codec, 250, block_records=100)
    reader = fastavro.reader(io.BytesIO(sink.getvalue()))
    assert reader.metadata["avro.codec"] == codec
    assert reader.writer_schema == fastavro.parse_schema(
        extended_schema(schema, CONFIG), _write_hint=False
    )
    assert list(reader) == [{**record(i, schema), **enrichment(i)} for i in range(250)]
    assert (stats.records, stats.blocks, stats.bytes_written) == (250, 3, len(sink.getvalue()))


def test_the_header_carries_the_schema_text_as_given():
    sink = io.BytesIO()
    text = schema_json(extended_schema(V1, CONFIG))
    AvroContainerWriter(sink, text, "null").close()
    assert fastavro.reader(io.BytesIO(sink.getvalue())).metadata["avro.schema"] == text


def test_an_empty_file_is_valid_and_has_no_block():
    sink = io.BytesIO()
    stats = write(sink, V1, "snappy", 0)
    assert list(fastavro.reader(io.BytesIO(sink.getvalue()))) == []
    assert (stats.records, stats.blocks) == (0, 0)


def test_snappy_blocks_end_with_the_crc_of_the_uncompressed_records():
    sink = io.BytesIO()
    write(sink, V1, "snappy", 30, block_records=10)
    data = sink.getvalue()
    blocks = list(fastavro.block_reader(io.BytesIO(data)))
    assert [b.num_records for b in blocks] == [10, 10, 10]
    for block in blocks:
        raw = io.BytesIO(data[block.offset : block.offset + block.size])
        fastavro.schemaless_reader(raw, "long")  # record count
        size = fastavro.schemaless_reader(raw, "long")
        payload = raw.read(size)
        uncompressed = bytes(snappy.decompress_raw(payload[:-4]))
        assert payload[-4:] == zlib.crc32(uncompressed).to_bytes(4, "big")


def test_snappy_blocks_are_cramjams_raw_snappy_whatever_the_size_order():
    """Blocks compressed into the writer's reused buffer are exactly ``compress_raw``'s bytes,
    also after a large block grew the buffer and smaller ones follow (files stay identical
    to those written before, and to the other stage path's)."""
    sink = io.BytesIO()
    writer = AvroContainerWriter(sink, '"bytes"', "snappy", block_records=1)
    bodies = [bytes(range(256)) * 300, b"a" * 10, b"", bytes(range(200)) * 2]
    for body in bodies:
        writer.append(fastavro_bytes(body))
    writer.close()
    data = sink.getvalue()
    for block, body in zip(fastavro.block_reader(io.BytesIO(data)), bodies, strict=True):
        raw = io.BytesIO(data[block.offset : block.offset + block.size])
        fastavro.schemaless_reader(raw, "long")
        payload = raw.read(fastavro.schemaless_reader(raw, "long"))
        record = fastavro_bytes(body)
        assert payload == bytes(snappy.compress_raw(record)) + zlib.crc32(record).to_bytes(4, "big")


def fastavro_bytes(body: bytes) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "bytes", body)
    return out.getvalue()


@pytest.mark.parametrize("options, blocks", [
    ({"block_records": 7}, [7, 7, 6]),
    ({"block_bytes": 1}, [1] * 20),
    ({}, [20]),
])  # fmt: skip
def test_blocks_are_cut_by_record_count_or_size(options, blocks):
    sink = io.BytesIO()
    write(sink, V1, "deflate", 20, **options)
    assert [b.num_records for b in fastavro.block_reader(io.BytesIO(sink.getvalue()))] == blocks


class CountingSink(io.RawIOBase):
    """A sink that keeps only a byte count, so the test itself stays small."""

    def __init__(self) -> None:
        self.size = 0
        self.writes = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.size += len(data)
        self.writes += 1
        return len(data)


def test_a_million_records_stream_through_one_block_of_memory():
    sink = CountingSink()
    block_bytes = 64 * 1024
    writer = AvroContainerWriter(sink, '"bytes"', "snappy", block_bytes=block_bytes)
    record = b"\x1erecord-payload-123"
    written_midway = 0
    for i in range(1_000_000):
        writer.append(record, b"\x02")
        if i == 500_000:
            written_midway = sink.size
    stats = writer.close()
    assert stats.records == 1_000_000
    assert stats.record_bytes == 20_000_000
    assert writer.peak_buffered_bytes <= block_bytes + len(record) + 1
    assert written_midway > 0  # blocks went to the sink while records were still coming
    assert stats.blocks >= 20_000_000 // (block_bytes + 20)
    assert stats.bytes_written == sink.size


def test_allocations_stay_within_a_few_blocks_whatever_the_record_count():
    sink = CountingSink()
    writer = AvroContainerWriter(sink, '"bytes"', "snappy", block_bytes=64 * 1024)
    record = b"\x1erecord-payload-123"
    tracemalloc.start()
    try:
        for _ in range(300_000):  # 6 MB of records
            writer.append(record, b"\x02")
        writer.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 512 * 1024  # the block, its compressed copy and Python's small change


def test_the_writer_refuses_use_after_close_and_bad_options():
    from array import array

    writer = AvroContainerWriter(io.BytesIO(), '"string"', "null")
    assert writer.close() == writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.append(b"\x00")
    with pytest.raises(ValueError, match="closed"):  # a whole block of a batch, too
        writer.append_many(b"\x00" * 10, memoryview(array("Q", [5, 10])))
    for bad in (
        {"codec": "lzo"},
        {"sync_marker": b"short"},
        {"metadata": {"avro.codec": b"x"}},
        {"block_records": 0},
    ):
        with pytest.raises(ValueError):
            AvroContainerWriter(io.BytesIO(), '"string"', **bad)


def test_a_failed_context_leaves_the_last_block_unwritten():
    sink = io.BytesIO()
    with pytest.raises(RuntimeError), AvroContainerWriter(sink, '"string"', "null") as writer:
        writer.append(b"\x02a")
        raise RuntimeError("task failed")
    assert list(fastavro.reader(io.BytesIO(sink.getvalue()))) == []


def test_user_metadata_and_sync_marker_are_written():
    sink = io.BytesIO()
    AvroContainerWriter(
        sink, '"string"', "null", sync_marker=b"s" * 16, metadata={"kbqe.range": b"0-9"}
    ).close()
    reader = fastavro.reader(io.BytesIO(sink.getvalue()))
    assert reader.metadata["kbqe.range"] == "0-9"
    assert sink.getvalue().endswith(b"s" * 16)


def _duckdb_avro():
    duckdb = pytest.importorskip("duckdb")
    extension = pytest.importorskip("duckdb_extension_avro")
    path = next(pathlib.Path(extension.__file__).parent.rglob("avro.duckdb_extension"), None)
    if path is None:
        pytest.skip("the avro extension file is not in duckdb_extension_avro")
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{path}'")
    return con


@pytest.mark.parametrize("codec", CODECS)
def test_duckdb_avro_reads_the_files_with_their_logical_types(codec, tmp_path):
    con = _duckdb_avro()
    path = tmp_path / f"orders.{codec}.avro"
    with open(path, "wb") as sink:
        write(sink, V2, codec, 50, block_records=16)
    rows = con.execute(
        f"SELECT count(*), min(_kafka_offset), max(_kafka_offset), min(day), min(_event_date), "
        f"max(_kafka_timestamp), count(note), min(channel) FROM read_avro('{path}')"
    ).fetchall()
    assert rows == [(50, 1000, 1049, dt.date(2024, 9, 13), dt.date(2024, 9, 13),
                     dt.datetime(2024, 9, 13, 12, 0, 1), 25, "app")]  # fmt: skip


@pytest.mark.parametrize(
    "block_records, block_bytes",
    [(1, 1 << 20), (3, 1 << 20), (1000, 50), (7, 120), (65_536, 1 << 20)],
)
@pytest.mark.parametrize("chunk", [1, 2, 5, 64])
@pytest.mark.parametrize("codec", ["deflate", "snappy", "null"])
def test_records_appended_in_batches_make_the_same_file_as_one_by_one(
    block_records, block_bytes, chunk, codec
):
    # The native stage kernel hands records over per batch: the blocks must end after exactly
    # the records where one-by-one appends end them, so the files are identical (a block that
    # lies whole in one batch is compressed where it lies, not copied first: same bytes in).
    import random
    from array import array

    rng = random.Random(block_records * 31 + chunk)
    records = [rng.randbytes(rng.randint(1, 90)) for _ in range(400)]
    sync = bytes(range(16))
    one, many = io.BytesIO(), io.BytesIO()
    options = dict(
        block_records=block_records, block_bytes=block_bytes, sync_marker=sync, codec=codec
    )
    with AvroContainerWriter(one, '"bytes"', **options) as writer:
        for record in records:
            writer.append(record)
    with AvroContainerWriter(many, '"bytes"', **options) as writer:
        for at in range(0, len(records), chunk):
            part = records[at : at + chunk]
            ends = array("Q")
            total = 0
            for record in part:
                total += len(record)
                ends.append(total)
            writer.append_many(b"".join(part), memoryview(ends))
    batched = writer.stats  # closed: every block counted
    assert many.getvalue() == one.getvalue()
    assert batched.records == len(records) and batched.record_bytes == sum(map(len, records))
