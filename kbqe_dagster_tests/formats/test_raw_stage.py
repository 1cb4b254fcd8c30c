"""``format: raw``: every message is one row of a fixed schema — the value, key and headers as
bytes, the Kafka timestamp, the enrichment columns — dated by its Kafka timestamp, whatever the
value holds; nothing is dead-lettered for its content. The native kernel stages the same files
byte for byte."""

from __future__ import annotations

import base64
import io
import random
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.raw_archive import RAW_SCHEMA_ID, encode_raw_value
from kbqe_dagster.core.formats.source_format import DECLARED_SCHEMA_IDS, SourceFormat
from kbqe_dagster.core.protocol.naming import parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.stager_registry import stager_for
from kbqe_dagster.staging.stager import chosen_stager
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, stage

TOPIC = "audit.anything"
TS = 1_726_238_205_123  # 2024-09-13T14:36:45.123Z
GARBAGE = b"\xff\xfe\x00\x80not utf-8\xc3"
FRAMED_AVRO = b"\x00\x00\x00\x01\x2c" + b"\x02\x0cfoobar"  # an id no registry here knows
PROTOBUF = b"\x00\x00\x00\x00\x07\x00\x08\x96\x01"


def pipeline(topic: dict | None = None, top: dict | None = None):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "raw",
                    "routing": {"mode": "static", "dataset": "archive", "table": "events"},
                    **(topic or {}),
                }
            ],
            "allowed_destinations": ["archive.*"],
            **(top or {}),
        },
        source="test",
    )


def rows(staged, table: str = "events") -> list[dict]:
    [name] = [n for n in staged.files if n.endswith(".avro") and f".{table}." in n]
    return list(fastavro.reader(io.BytesIO(staged.files[name])))


def python_stage(tmp_path: Path, messages, config=None):
    return stage(tmp_path, config or pipeline(), TOPIC, {}, messages, native=False)


# --- configuration ---------------------------------------------------------------------------
def test_a_raw_topic_is_staged_by_the_raw_stager_dated_by_its_kafka_timestamp_alone() -> None:
    config = pipeline(top={"event_time": {"fields": ["eventTime"]}})
    topic = config.topic(TOPIC)
    assert topic.format is SourceFormat.RAW
    assert stager_for(topic).__name__ == "RawRangeStager"
    # The top-level fields describe decoded records: a raw topic ignores them.
    assert (topic.event_time.fields, topic.event_time.kafka_timestamp_fallback) == ((), True)
    assert topic.required_fields == ()
    assert RAW_SCHEMA_ID >= DECLARED_SCHEMA_IDS


@pytest.mark.parametrize(
    ("topic", "where", "says"),
    [
        ({"routing": None}, "routing.mode", "needs routing mode static or function"),
        ({"routing": {"mode": "fields"}}, "routing.mode", "no record fields or schema names"),
        ({"routing": {"mode": "schema_name", "dataset": "archive"}}, "routing.mode", "static or"),
        ({"transforms": [{"drop": ["a"]}]}, "transforms", "never decoded"),
        ({"keyed": {"key": ["id"], "version": "v"}}, "keyed", "not with format: raw"),
        ({"event_time": {"fields": ["at"]}}, "event_time.fields", "Kafka timestamp"),
        ({"event_time": {"kafka_timestamp_fallback": False}}, "event_time.kafka_timestamp", "raw"),
        (
            {"routing": {"mode": "function", "function": "json:dumps", "function_fields": ["a"]}},
            "routing.function_fields",
            "never decoded",
        ),
    ],
)
def test_options_that_need_decoded_values_are_refused_naming_the_topic_key(
    topic: dict, where: str, says: str
) -> None:
    entry = {k: v for k, v in topic.items() if v is not None}
    if topic.get("routing", {}) is None:
        raw = {"name": TOPIC, "format": "raw", **entry}
        with pytest.raises(ConfigError) as error:
            parse_pipeline_config(
                {"version": 1, "topics": [raw], "allowed_destinations": ["archive.*"]}, "test"
            )
    else:
        with pytest.raises(ConfigError) as error:
            pipeline(entry)
    assert f"topics[0].{where}" in str(error.value) and says in str(error.value)


def test_destinations_are_refused_with_format_raw() -> None:
    with pytest.raises(ConfigError, match=r"topics\[0\]\.destinations: not with format: raw"):
        parse_pipeline_config(
            {
                "version": 1,
                "topics": [
                    {
                        "name": TOPIC,
                        "format": "raw",
                        "destinations": [
                            {"routing": {"mode": "static", "dataset": "archive", "table": "a"}}
                        ],
                    }
                ],
                "allowed_destinations": ["archive.*"],
            },
            "test",
        )


def test_an_enrichment_column_named_like_a_raw_column_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"enrichment: .*_kafka_key.*raw columns of topic"):
        pipeline(top={"enrichment": {"offset_column": "_kafka_key"}})


# --- the Python path (the reference) ---------------------------------------------------------
def test_any_value_is_one_row_with_its_bytes_key_headers_and_kafka_timestamp(
    tmp_path: Path,
) -> None:
    values = [FRAMED_AVRO, PROTOBUF, b'{"json": "text"}', GARBAGE, b"", None]
    headers = [("trace", b"\x01\x02"), ("trace", None), ("\u00e9t\u00e9", b"x")]
    messages = [
        Msg(TOPIC, 0, 10 + i, v, key=None if i == 1 else b"k\xff%d" % i, headers=headers,
            timestamp=(1, TS + i * 3_600_000))
        for i, v in enumerate(values)
    ]  # fmt: skip
    staged = python_stage(tmp_path, messages)
    assert staged.result is not None
    assert (staged.result.records, staged.result.dead_letters) == (6, {})
    got = rows(staged)
    assert [r["value"] for r in got] == values  # a tombstone is a row with a null value
    assert [r["_kafka_key"] for r in got][:3] == [b"k\xff0", None, b"k\xff2"]
    assert got[0]["_kafka_headers"] == [
        {"key": "trace", "value": b"\x01\x02"},
        {"key": "trace", "value": None},
        {"key": "\u00e9t\u00e9", "value": b"x"},
    ]
    assert [r["_kafka_offset"] for r in got] == list(range(10, 16))
    assert str(got[0]["_event_date"]) == "2024-09-13"
    assert str(got[-1]["_event_date"]) == "2024-09-13"  # 14:36 + 5 h, still that UTC day
    assert int(got[0]["_kafka_timestamp"].timestamp() * 1000) == TS
    [name] = [n for n in staged.files if n.endswith(".avro")]
    assert parse_name(name).key.schema_id == RAW_SCHEMA_ID


def test_the_pipeline_enrichment_names_are_kept_when_it_turns_the_columns_on(
    tmp_path: Path,
) -> None:
    config = pipeline(top={"enrichment": {"key_column": "k", "headers_column": "h"}})
    staged = python_stage(
        tmp_path, [Msg(TOPIC, 0, 0, b"v", key=b"x", headers=[("a", b"b")])], config
    )
    [row] = rows(staged)
    assert (row["k"], row["h"], row["value"]) == (b"x", [{"key": "a", "value": b"b"}], b"v")


def test_an_hour_table_gets_the_kafka_timestamps_hour(tmp_path: Path) -> None:
    config = pipeline(top={"tables": {"archive.events": {"partitioning": "hour"}}})
    staged = python_stage(tmp_path, [Msg(TOPIC, 0, 0, b"v", timestamp=(1, TS))], config)
    [row] = rows(staged)
    assert row["_event_hour"].isoformat() == "2024-09-13T14:00:00+00:00"
    [done] = [n for n in staged.files if n.endswith(".done")]
    assert b"2024-09-13T14" in staged.files[done]


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (Msg(TOPIC, 0, 0, b"v", timestamp=(0, -1)), "missing_event_time"),
        (Msg(TOPIC, 0, 0, b"x" * 64), "oversized"),
    ],
    ids=["no Kafka timestamp", "oversized"],
)
def test_only_what_is_not_content_is_dead_lettered(tmp_path: Path, message, reason) -> None:
    config = pipeline({"staging": {"max_message_size": 32}})
    staged = python_stage(tmp_path, [message], config)
    assert staged.result is not None and staged.result.dead_letters == {reason: 1}


def test_function_routing_sees_the_key(tmp_path: Path) -> None:
    config = pipeline(
        {
            "routing": {
                "mode": "function",
                "function": "kbqe_dagster_tests.formats.test_raw_stage:route_by_key",
            }
        }
    )
    staged = python_stage(
        tmp_path, [Msg(TOPIC, 0, 0, b"1", key=b"eu"), Msg(TOPIC, 0, 1, b"2", key=b"us")], config
    )
    assert [r["value"] for r in rows(staged, "events_eu")] == [b"1"]
    assert [r["value"] for r in rows(staged, "events_us")] == [b"2"]


def route_by_key(message) -> tuple[str, str]:
    """A ``function`` route of raw rows: by the Kafka key."""
    return "archive", f"events_{message.key.decode()}"


def test_the_value_body_is_the_avro_union_of_null_and_bytes() -> None:
    assert encode_raw_value(None) == b"\x00"
    assert encode_raw_value(b"") == b"\x02\x00"
    assert encode_raw_value(b"x" * 64) == b"\x02\x80\x01" + b"x" * 64


def test_raw_rows_encode_as_storage_write_rows_that_parse_back_to_the_staged_values(
    tmp_path: Path,
) -> None:
    """``delivery: storage_write`` appends the staged records as proto rows
    (core/formats/avro_proto.py): a raw row's bytes, null value and headers survive it."""
    from kbqe_dagster_tests.support.proto_rows import parsed

    headers = [("trace", b"\x00"), ("empty", None)]
    messages = [
        Msg(TOPIC, 0, i, v, key=b"k", headers=headers) for i, v in enumerate((GARBAGE, None))
    ]
    staged = python_stage(tmp_path, messages)
    [name] = [n for n in staged.files if n.endswith(".avro")]
    with io.BytesIO(staged.files[name]) as f:
        reader = fastavro.reader(f)
        schema, records = reader.writer_schema, list(reader)
    got = parsed(schema, records)
    assert [r.get("value") for r in got] == [GARBAGE, None]  # null: the field left unset
    assert [r["_kafka_key"] for r in got] == [b"k", b"k"]
    assert got[0]["_kafka_headers"] == [{"key": "trace", "value": b"\x00"}, {"key": "empty"}]


@pytest.mark.parametrize("native", [False, True], ids=["python", "kernel"])
def test_a_storage_write_raw_table_gets_every_row_through_the_api_and_no_file(
    tmp_path: Path, native: bool
) -> None:
    """``delivery: storage_write`` with the API faked at its client boundary (the emulator
    loses the rows of tables with a RECORD column, such as the headers)."""
    if native:
        kernel = pytest.importorskip("kbqe_dagster_kernel", reason="the kernel is not built")
        if not hasattr(kernel, "RawKernel"):
            pytest.skip("the native kernel was built before the raw routine")
    from kbqe_dagster.delivery.sink import delivery_sink
    from kbqe_dagster.resources.kafka.clients import KafkaSettings
    from kbqe_dagster.resources.schema_registry import RegistrySettings
    from kbqe_dagster.resources.staging_store import StagingLocation
    from kbqe_dagster.stager_registry import stage_context
    from kbqe_dagster.staging.native_kernel import NativeStaging
    from kbqe_dagster.staging.task import stage_messages
    from kbqe_dagster_tests.staging.kernel_equality import ListReader
    from kbqe_dagster_tests.support.storage_write import fake_storage_write

    config = pipeline({"delivery": "storage_write"})
    writer_settings, keeper_settings = fake_storage_write(str(tmp_path))
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = stage_context(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        config,
        TOPIC,
        sink=delivery_sink(config, writer_settings, keeper_settings),
        native_kernel=native,
    )
    values = [GARBAGE, None, b"", FRAMED_AVRO]
    messages = [
        Msg(TOPIC, 0, i, v, key=b"k%d" % i, headers=[("h", b"\x01"), ("n", None)])
        for i, v in enumerate(values)
    ]
    workdir = tmp_path / "work"
    workdir.mkdir()
    stager = chosen_stager(ctx)(ctx, OffsetRange(TOPIC, 0, 0, len(values)), workdir)
    driver = NativeStaging.for_stager(stager)
    assert (driver is not None) is native
    stage_messages(stager, ListReader(messages, 0, len(values)), driver)
    result = stager.commit(staging.open(), len(values))

    (delivery,) = result.delivered
    assert (delivery.table, delivery.rows, result.dead_letters) == ("events", 4, {})
    assert not [f for f in staging.open().list("") if f.name.endswith(".avro")]
    rows = writer_settings.writer().table_rows("archive", "events")
    b64 = base64.b64decode
    assert [b64(r["value"]) if "value" in r else None for r in rows] == values
    assert [b64(r["_kafka_key"]) for r in rows] == [b"k0", b"k1", b"k2", b"k3"]
    assert rows[0]["_kafka_headers"] == [{"key": "h", "value": "AQ=="}, {"key": "n"}]


# --- the native kernel -----------------------------------------------------------------------
def random_message(rnd: random.Random, offset: int) -> Msg:
    """A message of every shape a raw topic meets, edge cases over-represented."""
    roll = rnd.random()
    if roll < 0.1:
        value = None
    elif roll < 0.15:
        value = b"x" * rnd.choice((200, 201, 5000))  # around max_message_size 200
    else:
        value = rnd.randbytes(rnd.choice((0, 1, 5, 63, 64, 300)))
    key = None if rnd.random() < 0.3 else rnd.randbytes(rnd.randrange(0, 20))
    headers = None
    if rnd.random() < 0.5:
        headers = [
            (rnd.choice(("a", "trace", "\u00e9", "")), None if rnd.random() < 0.2 else rnd.randbytes(4))
            for _ in range(rnd.randrange(0, 4))
        ]  # fmt: skip
    ts_roll = rnd.random()
    if ts_roll < 0.05:
        timestamp = (0, -1)  # no timestamp: missing_event_time
    elif ts_roll < 0.08:
        timestamp = (1, 1_600_000_000_000)  # before min_date: invalid_event_time
    else:
        timestamp = (rnd.choice((1, 2)), TS + rnd.randrange(-3, 3) * 3_600_000 + offset)
    return Msg(TOPIC, 3, offset, value, key=key, headers=headers, timestamp=timestamp)


@pytest.mark.parametrize("hourly", [False, True], ids=["DAY", "HOUR"])
@pytest.mark.parametrize("seed", range(6))
def test_the_kernel_stages_raw_rows_into_the_same_files_as_the_python_path(
    tmp_path: Path, seed: int, hourly: bool
) -> None:
    kernel = pytest.importorskip("kbqe_dagster_kernel", reason="the native kernel is not built")
    if not hasattr(kernel, "RawKernel"):
        pytest.skip("the native kernel was built before the raw routine")
    rnd = random.Random(seed)
    top: dict = {"event_time": {"min_date": "2024-01-01"}}
    if hourly:
        top["tables"] = {"archive.events": {"partitioning": "hour"}}
    config = pipeline({"staging": {"max_message_size": 200}}, top)
    first = rnd.randrange(0, 1 << 40)
    messages = [random_message(rnd, first + i) for i in range(rnd.randrange(50, 400))]
    batch = rnd.choice((1, 7, 64, 500))
    python = stage(tmp_path / "p", config, TOPIC, {}, messages, native=False, partition=3,
                   batch_size=batch)  # fmt: skip
    native = stage(tmp_path / "n", config, TOPIC, {}, messages, native=True, partition=3,
                   batch_size=batch)  # fmt: skip
    assert_same(python, native, f"seed {seed}")
    assert python.result is not None and python.result.dead_letters  # the edges were met
    assert native.kernel_messages >= python.result.records * 0.8
    assert set(native.handbacks or {}) <= {"oversized", "event_time_uncertain"}


def test_the_kernel_leaves_function_routing_to_the_python_path(tmp_path: Path) -> None:
    pytest.importorskip("kbqe_dagster_kernel", reason="the native kernel is not built")
    from kbqe_dagster.formats.raw_stage import RawNativeStaging

    class Stager:
        static_destination = None

    assert RawNativeStaging.for_range(Stager(), object()) is None
