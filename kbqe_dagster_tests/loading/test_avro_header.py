"""The writer schema of a staged file is read from its container header alone, with a
ranged read that grows only when the header is larger than the first read."""

from __future__ import annotations

import io

import fastavro
import pytest

from kbqe_dagster.core.errors import LoadError
from kbqe_dagster.loading import avro_header
from kbqe_dagster.loading.avro_header import parse_header, read_avro_schema
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.loading.staged import ORDER_V1


def container(schema: dict, records: int = 3, codec: str = "snappy") -> bytes:
    buffer = io.BytesIO()
    rows = [{"orderId": f"o{i}", "amountCents": i} for i in range(records)]
    fastavro.writer(buffer, fastavro.parse_schema(schema), rows, codec=codec)
    return buffer.getvalue()


def test_the_schema_is_read_from_the_header(tmp_path) -> None:
    store = LocalStagingStore(tmp_path)
    store.put_bytes("f.avro", container(ORDER_V1, records=10_000))

    schema = read_avro_schema(store, "f.avro")

    assert [f["name"] for f in schema["fields"]] == ["orderId", "amountCents"]


def test_a_header_larger_than_the_first_read_is_read_in_growing_chunks(
    tmp_path, monkeypatch
) -> None:
    wide = {**ORDER_V1, "doc": "x" * 5_000}
    store = LocalStagingStore(tmp_path)
    store.put_bytes("f.avro", container(wide))
    reads: list[int] = []
    real = store.read_head
    monkeypatch.setattr(avro_header, "FIRST_READ", 1_000)
    monkeypatch.setattr(store, "read_head", lambda n, size: reads.append(size) or real(n, size))

    schema = read_avro_schema(store, "f.avro")

    assert schema["doc"] == "x" * 5_000
    assert reads == [1_000, 4_000, 16_000]


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"garbage-not-avro", "bad magic"), (b"Ob", "too short"), (b"Obj\x01\x02\x08", "ends early")],
)
def test_a_file_that_is_no_avro_container_is_named_in_the_error(tmp_path, content, message) -> None:
    store = LocalStagingStore(tmp_path)
    store.put_bytes("f.avro", content)

    with pytest.raises(LoadError, match=message) as error:
        read_avro_schema(store, "f.avro")
    assert "f.avro" in str(error.value)


def test_parse_header_returns_codec_and_schema() -> None:
    metadata = parse_header(container(ORDER_V1, codec="deflate"))
    assert metadata["avro.codec"] == b"deflate"
    assert b'"com.acme.sales.Order"' in metadata["avro.schema"]
