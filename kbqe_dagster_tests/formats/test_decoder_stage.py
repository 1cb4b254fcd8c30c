"""``format: decoder``: a user function turns each message into an Avro record and its schema;
the record is staged under that schema like any other, routed and dated on its fields, and
whatever the decoder refuses or breaks on is dead-lettered with its reason."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from examples.fix.decoder import SCHEMAS
from examples.fix.messages import bad_messages, order_flow
from kbqe_dagster import DecodeError, RawMessage
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError, StageRangeFailed
from kbqe_dagster.core.formats.source_format import SourceFormat, declared_schema_id
from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import parse_frame
from kbqe_dagster.formats import decoder_stage
from kbqe_dagster.formats.decoder_stage import DecoderRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage

TOPIC = "fix.orders"
HERE = "kbqe_dagster_tests.formats.test_decoder_stage"
FIX = "examples.fix.decoder:decode_fix"
TS = 1_726_238_205_000

# --- decoders the tests name in their pipelines ---------------------------------------------
ECHO = {
    "type": "record",
    "name": "Echo",
    "namespace": "tests",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "text", "type": "string"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "headers", "type": {"type": "array", "items": "string"}},
        {"name": "at", "type": ["null", "long"]},
        {"name": "where", "type": "string"},
    ],
}


def echo(message: RawMessage) -> tuple[dict, dict]:
    """The message as a record, every RawMessage attribute in a column; the value's first
    word names the table. A fresh (equal) schema dict per call, like a careless decoder."""
    table, _, text = message.value.decode().partition(" ")
    return {
        "datasetName": "fix",
        "tableName": table,
        "text": text,
        "key": message.key,
        "headers": [name for name, _ in message.headers],
        "at": message.timestamp_ms,
        "where": f"{message.topic}/{message.partition}/{message.offset}",
    }, json.loads(json.dumps(ECHO))


def misbehaving(message: RawMessage) -> Any:
    """One misbehaviour per value, to prove each lands as its own reason."""
    kind = message.value.decode()
    record = {
        "datasetName": "fix",
        "tableName": "t",
        "text": kind,
        "key": None,
        "headers": [],
        "at": None,
        "where": "",
    }
    if kind == "reject":
        raise DecodeError("checksum says no")
    if kind == "custom_reason":
        error = DecodeError("mine")
        error.reason = "made_up"  # not in the closed set of reasons: decoder_rejected wins
        raise error
    if kind == "framed":
        parse_frame(b"\x05abcdef")  # a kbqe bad input the decoder meets: its reason stays
    if kind == "bug":
        return {}["missing"]
    if kind == "none":
        return None
    if kind == "triple":
        return record, ECHO, 1
    if kind == "wrong_type":
        return {**record, "at": "noon"}, ECHO
    if kind == "missing_field":
        return {k: v for k, v in record.items() if k != "text"}, ECHO
    if kind == "extra_field":
        return {**record, "surprise": 1}, ECHO
    if kind == "not_a_record":
        return record, {"type": "string"}
    if kind == "invalid_schema":
        return record, {"type": "record", "name": "Bad", "fields": [{"name": "a", "type": "x"}]}
    if kind == "collides":
        return {**record, "_kafka_offset": 1}, {
            **ECHO,
            "fields": ECHO["fields"] + [{"name": "_kafka_offset", "type": "long"}],
        }
    if kind == "unserializable_schema":
        return record, {"type": "record", "name": "R", "fields": [], "x": object()}
    if kind == "exit":
        raise SystemExit(3)
    return record, ECHO


def new_schema_each_time(message: RawMessage) -> tuple[dict, dict]:
    schema = {**ECHO, "name": f"Echo{message.offset}"}
    return {
        "datasetName": "fix",
        "tableName": "t",
        "text": "",
        "key": None,
        "headers": [],
        "at": None,
        "where": "",
    }, schema


NESTED = {
    "type": "record",
    "name": "Outer",
    "namespace": "tests",
    "fields": [
        {
            "name": "u",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Inner",
                    "fields": [{"name": "x", "type": ["null", "long"], "default": None}],
                },
            ],
            "default": None,
        },
        {"name": "v", "type": ["null", "Inner"], "default": None},
        {"name": "w", "type": {"type": "array", "items": ["null", "string"]}, "default": []},
    ],
}


def nested(message: RawMessage) -> tuple[dict, dict]:
    """Unions around a named record and a reference to it by name."""
    return json.loads(message.value), NESTED


NOT_CALLABLE = 42


# --- helpers ---------------------------------------------------------------------------------
def pipeline(decoder: str = FIX, **topic: Any):
    routing = {"mode": "schema_name", "dataset": "fix"} if decoder == FIX else {"mode": "fields"}
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "decoder",
                    "decoder": decoder,
                    "routing": routing,
                    "event_time": {
                        "fields": ["transact_time", "sending_time"],
                        "date_rule": "utc",
                        "kafka_timestamp_fallback": decoder != FIX,
                    },
                    **topic,
                }
            ],
            "allowed_destinations": ["fix.*"],
        }
    )


def stager_for(tmp_path: Path, config, count: int) -> tuple[DecoderRangeStager, StagingLocation]:
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"), staging, config, TOPIC
    )
    workdir = tmp_path / "work"
    workdir.mkdir(parents=True)
    stager = stager_class(ctx)(ctx, OffsetRange(TOPIC, 0, 0, max(count, 1)), workdir)
    return stager, staging


def stage(tmp_path: Path, values: list[bytes | None], config=None, headers=()):
    config = config or pipeline()
    stager, staging = stager_for(tmp_path, config, len(values))
    for offset, value in enumerate(values):
        stager.add(FakeMessage(TOPIC, 0, offset, value, b"k", list(headers), TS + offset))
    store = staging.open()
    return stager.commit(store, len(values)), store


def records(store, name: str) -> list[dict]:
    return list(fastavro.reader(io.BytesIO(store.read_bytes(name))))


def files_by_table(result) -> dict[str, str]:
    return {parse_name(n).key.table: n for n, _ in result.files}


def letters(result, store) -> list[dict]:
    [name] = [n for n, _ in result.files if ".dead_letters." in n]
    return records(store, name)


# --- FIX through the stager ------------------------------------------------------------------
def test_fix_orders_and_executions_land_in_their_own_tables_under_their_own_schemas(
    tmp_path: Path,
) -> None:
    flow = list(order_flow(4))
    result, store = stage(tmp_path, [s.value for s in flow])
    assert (result.messages, result.records, result.dead_letters) == (12, 12, {})
    files = files_by_table(result)
    assert set(files) == {"new_order_single", "execution_report"}
    orders = records(store, files["new_order_single"])
    executions = records(store, files["execution_report"])
    assert len(orders) == 4 and len(executions) == 8
    first = orders[0]
    assert first["msg_type"] == "D" and first["cl_ord_id"] == "C000000"
    assert first["sender_comp_id"] == "BUYSIDE" and first["msg_seq_num"] == 1
    assert first["transact_time"].isoformat() == "2024-09-13T14:30:00+00:00"
    assert first["_kafka_offset"] == 0 and str(first["_event_date"]) == "2024-09-13"
    fill = executions[1]
    assert (fill["exec_type"], fill["ord_status"], fill["cum_qty"], fill["leaves_qty"]) == (
        "F",
        "2",
        fill["last_qty"],
        0.0,
    )
    assert fill["order_id"] == "O000000" and fill["_kafka_offset"] == 2
    for table, msg_type in (("new_order_single", "D"), ("execution_report", "8")):
        name = parse_name(files[table])
        assert isinstance(name, AvroFileName)
        assert name.key.schema_id == declared_schema_id(SCHEMAS[msg_type])


def test_bad_fix_messages_are_dead_lettered_with_the_decoders_precise_reason(
    tmp_path: Path,
) -> None:
    bad = bad_messages()
    result, store = stage(tmp_path, [next(order_flow(1)).value] + [s.value for s in bad])
    assert result.records == 1 and result.dead_letters == {"decoder_rejected": len(bad)}
    by_offset = {letter["offset"]: letter for letter in letters(result, store)}
    for offset, sample in enumerate(bad, start=1):
        letter = by_offset[offset]
        assert letter["reason"] == "decoder_rejected"
        assert sample.expect in letter["error"], letter["error"]
        assert f"fix.orders[0] offset {offset}" in letter["error"]
        assert letter["raw_value"] == sample.value and letter["schema_id"] is None


# --- the decoder's contract ------------------------------------------------------------------
def test_the_decoder_sees_value_key_headers_timestamp_and_coordinates_and_fields_route(
    tmp_path: Path,
) -> None:
    result, store = stage(
        tmp_path,
        [b"trades hello", b"quotes world"],
        pipeline(f"{HERE}:echo"),
        headers=[("h1", b"x"), ("h2", None)],
    )
    files = files_by_table(result)
    [trade] = records(store, files["trades"])
    assert (trade["text"], trade["key"], trade["headers"], trade["at"], trade["where"]) == (
        "hello",
        b"k",
        ["h1", "h2"],
        TS,
        "fix.orders/0/0",
    )
    assert records(store, files["quotes"])[0]["where"] == "fix.orders/0/1"
    assert str(trade["_event_date"]) == "2024-09-13"  # the Kafka timestamp fallback


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b"reject", "decoder_rejected", "checksum says no"),
        (b"custom_reason", "decoder_rejected", "mine"),
        (b"framed", "bad_magic", "magic"),
        (b"bug", "decoder_error", "raised KeyError at test_decoder_stage.py:"),
        (b"none", "decoder_error", "returned a NoneType, expected (record, schema)"),
        (b"triple", "decoder_error", "returned a tuple of 3 (dict, dict, int)"),
        (b"wrong_type", "decoder_schema_mismatch", "at"),
        (b"missing_field", "decoder_schema_mismatch", "text"),
        (b"extra_field", "decoder_schema_mismatch", "surprise"),
        (b"not_a_record", "unsupported_schema", "not an Avro record schema"),
        (b"invalid_schema", "unsupported_schema", "not valid Avro"),
        (b"collides", "unsupported_schema", "collides with field '_kafka_offset'"),
        (b"unserializable_schema", "unsupported_schema", "not JSON"),
        (None, "tombstone", "tombstone"),
    ],
)
def test_every_way_a_decoder_fails_is_a_dead_letter_with_its_reason(
    tmp_path: Path, value: bytes | None, reason: str, detail: str
) -> None:
    result, store = stage(tmp_path, [b"fine", value], pipeline(f"{HERE}:misbehaving"))
    assert result.records == 1 and result.dead_letters == {reason: 1}
    [letter] = letters(result, store)
    assert letter["reason"] == reason and detail in letter["error"], letter["error"]
    assert "fix.orders[0] offset 1" in letter["error"]
    if reason.startswith("decoder_error"):
        assert f"{HERE}:misbehaving" in letter["error"]


def test_unions_named_types_and_defaults_are_checked_and_written_in_the_schemas_order(
    tmp_path: Path,
) -> None:
    config = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "decoder",
                    "decoder": f"{HERE}:nested",
                    "routing": {"mode": "static", "dataset": "fix", "table": "nested"},
                    "event_time": {"kafka_timestamp_fallback": True},
                }
            ],
        }
    )
    values = [
        {"u": {"x": 1}, "v": {"x": None}, "w": ["a", None]},
        {"u": None},
        {"u": {"x": "one"}},
        {"v": {"x": 2.5}},
        {"w": [3]},
    ]
    result, store = stage(tmp_path, [json.dumps(v).encode() for v in values], config)
    assert result.records == 2 and result.dead_letters == {"decoder_schema_mismatch": 3}
    rows = records(store, files_by_table(result)["nested"])
    assert [{k: r[k] for k in ("u", "v", "w")} for r in rows] == [
        {"u": {"x": 1}, "v": {"x": None}, "w": ["a", None]},
        {"u": None, "v": None, "w": []},
    ]
    errors = [letter["error"] for letter in letters(result, store)]
    # fastavro names a field by its record's full name; with null tried last, the error is
    # the present value's branch, not "expected null"
    assert [e.split("schema: ")[1] for e in errors] == [
        "tests.Inner.x is <one> of type <class 'str'> expected long",
        "tests.Inner.x is <2.5> of type <class 'float'> expected long",
        "tests.Outer.w is <3> of type <class 'int'> expected string",
    ]


def test_a_decoder_bug_stops_the_range_when_the_topic_says_fail(tmp_path: Path) -> None:
    config = pipeline(f"{HERE}:misbehaving", on_bad_input="fail")
    stager, _ = stager_for(tmp_path, config, 2)
    stager.add(FakeMessage(TOPIC, 0, 0, b"fine", None, [], TS))
    with pytest.raises(StageRangeFailed, match=r"fix.orders\[0\] offset 1: decoder_error"):
        stager.add(FakeMessage(TOPIC, 0, 1, b"bug", None, [], TS))


def test_system_exit_from_a_decoder_is_not_swallowed(tmp_path: Path) -> None:
    stager, _ = stager_for(tmp_path, pipeline(f"{HERE}:misbehaving"), 1)
    with pytest.raises(SystemExit):
        stager.add(FakeMessage(TOPIC, 0, 0, b"exit", None, [], TS))


def test_each_schema_is_derived_once_however_often_the_decoder_returns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    derived: list[str] = []
    real = decoder_stage._derive
    monkeypatch.setattr(
        decoder_stage,
        "_derive",
        lambda schema, enrichment: derived.append(schema["name"]) or real(schema, enrichment),
    )
    flow = [s.value for s in order_flow(20)]  # constant schema objects
    result, _ = stage(tmp_path, flow)
    assert result.records == 60 and sorted(derived) == ["ExecutionReport", "NewOrderSingle"]
    derived.clear()
    result, _ = stage(tmp_path / "echo", [b"t a", b"t b", b"t c"], pipeline(f"{HERE}:echo"))
    assert result.records == 3 and derived == ["Echo"]  # equal dicts: one derivation


def test_a_decoder_inventing_a_schema_per_message_is_stopped_before_the_file_handles_run_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decoder_stage, "MAX_SCHEMAS_PER_RANGE", 2)
    result, store = stage(tmp_path, [b"a", b"b", b"c"], pipeline(f"{HERE}:new_schema_each_time"))
    assert result.records == 2 and result.dead_letters == {"unsupported_schema": 1}
    assert "more than 2 distinct schemas" in letters(result, store)[0]["error"]


def test_decoder_topics_take_the_python_path() -> None:
    assert DecoderRangeStager.native_kernel is False


# --- configuration ---------------------------------------------------------------------------
def test_a_decoder_topic_reads_its_decoder_path() -> None:
    topic = pipeline().topics[0]
    assert topic.format is SourceFormat.DECODER and topic.decoder == FIX


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ({"format": "decoder"}, "topics[0].decoder: required with format: decoder"),
        ({"decoder": FIX}, "topics[0].decoder: only with format: decoder"),
        (
            {"format": "decoder", "decoder": "examples.fix.nowhere:decode"},
            "topics[0].decoder: decoder 'examples.fix.nowhere:decode' cannot be imported: "
            "ModuleNotFoundError",
        ),
        (
            {"format": "decoder", "decoder": "examples.fix.decoder:nothing"},
            "topics[0].decoder: decoder 'examples.fix.decoder:nothing' cannot be imported: "
            "AttributeError",
        ),
        (
            {"format": "decoder", "decoder": f"{HERE}:NOT_CALLABLE"},
            "topics[0].decoder: decoder 'kbqe_dagster_tests.formats.test_decoder_stage:NOT_CALLABLE' "
            "is a int, not callable",
        ),
        (
            {"format": "decoder", "decoder": "decode_fix"},
            "topics[0].decoder: expected 'package.module:function', got 'decode_fix'",
        ),
        (
            {"format": "decoder", "decoder": FIX, "schema": ECHO},
            "topics[0].schema: only with format: json",
        ),
        (
            {
                "format": "decoder",
                "decoder": FIX,
                "keyed": {"key": ["a"], "version": "b"},
                "routing": {"mode": "static", "dataset": "fix", "table": "t"},
            },
            "topics[0].keyed: not with format: decoder",
        ),
    ],
)
def test_decoder_topic_mistakes_are_config_errors_at_their_key_path(topic, expected) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_config(
            {
                "version": 1,
                "topics": [{"name": TOPIC, "event_time": {"fields": ["at"]}, **topic}],
                "allowed_destinations": ["fix.*"],
            }
        )
    assert expected in str(caught.value)


def test_the_example_pipeline_file_is_valid() -> None:
    from kbqe_dagster.core.config.pipeline import load_pipeline_config

    config = load_pipeline_config(
        Path(__file__).resolve().parents[2] / "examples/fix/pipeline.yaml"
    )
    assert config.topics[0].decoder == FIX
    assert config.allowed_destinations.allows("fix", "new_order_single")
    assert config.allowed_destinations.allows("fix", "execution_report")


def test_transforms_apply_to_decoded_records_after_the_decoders_own_check(tmp_path: Path) -> None:
    """A decoder topic with ``transforms``: the decoder's record is checked against its own
    schema first (``decoder_schema_mismatch``), then transformed and staged under the derived
    schema's id."""
    config = pipeline(
        f"{HERE}:echo",
        transforms=[
            {"compute": "shout", "expression": "upper(text)", "type": "string"},
            {"drop": "headers"},
        ],
    )
    result, store = stage(tmp_path, [b"orders hello", b"orders bye"], config)
    assert (result.records, result.dead_letters) == (2, {})
    [name] = [n for n, _ in result.files]
    assert parse_name(name).key.schema_id != declared_schema_id(ECHO)
    rows = records(store, name)
    assert [(r["text"], r["shout"], "headers" in r) for r in rows] == [
        ("hello", "HELLO", False),
        ("bye", "BYE", False),
    ]
    bad, bad_store = stage(
        tmp_path / "bad",
        [b"wrong_type"],
        pipeline(f"{HERE}:misbehaving", transforms=[{"drop": "where"}]),
    )
    assert bad.dead_letters == {"decoder_schema_mismatch": 1}
