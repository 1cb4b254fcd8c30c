"""Topics with ``destinations``: one message staged into one file per destination, each with
its own transforms, projection, schema id and routing; all or nothing per message (a failing
destination dead-letters the whole message once, naming it, and stages nothing of it); one
commit covers every destination's files; every record-producing stager takes the same step."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from examples.fix.messages import order_flow
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.commit import parse_manifest
from kbqe_dagster.core.protocol.naming import parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.dead_letter_record import DEAD_LETTER_SCHEMA_ID
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.formats.decoder_stage import DecoderRangeStager
from kbqe_dagster.formats.json_stage import JsonRangeStager
from kbqe_dagster.formats.transform_stage import TransformRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
from kbqe_dagster_tests.support.framing import avro_framed

TOPIC = "fix.executions"
SCHEMA = {
    "type": "record",
    "name": "Execution",
    "namespace": "fix",
    "fields": [
        {"name": "exec_id", "type": "string"},
        {"name": "symbol", "type": "string"},
        {"name": "last_qty", "type": "string"},
        {"name": "last_px", "type": "double"},
        {"name": "venue", "type": "string"},
        {"name": "transact_time", "type": "string"},
    ],
}
NO_SYMBOL = {
    "type": "record",
    "name": "Execution",
    "namespace": "fix",
    "fields": [{"name": "exec_id", "type": "string"}, {"name": "transact_time", "type": "string"}],
}
IDS = {7: SCHEMA, 8: NO_SYMBOL}
WHOLE = {"routing": {"mode": "static", "dataset": "fix", "table": "executions"}}
FILLS = {
    "routing": {"mode": "static", "dataset": "fix", "table": "fills_by_symbol"},
    "transforms": [
        {"cast": "last_qty", "to": "double"},
        {"compute": "notional", "expression": "last_qty * last_px", "type": "double"},
    ],
    "fields": ["symbol", "last_qty", "last_px", "notional"],
}


def framed(schema_id: int, record: dict) -> bytes:
    return avro_framed(schema_id, IDS[schema_id], record)


def execution(i: int, **changes) -> dict:
    return {
        "exec_id": f"E{i}",
        "symbol": "ACME" if i % 2 else "GOOG",
        "last_qty": f"{i + 1}",
        "last_px": 2.5,
        "venue": "XPAR",
        "transact_time": "2024-09-13T14:30:00Z",
        **changes,
    }


def config(destinations=(WHOLE, FILLS), **topic):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "destinations": list(destinations),
                    "event_time": {"fields": ["transact_time"], "date_rule": "utc"},
                    **topic,
                }
            ],
            "allowed_destinations": ["routed.*"],
        }
    )


def stage(tmp_path: Path, values, pipeline):
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        pipeline,
        TOPIC,
        native_kernel=True,
    )
    rng = OffsetRange(TOPIC, 0, 0, len(values))
    workdir = tmp_path / "work"
    workdir.mkdir()
    stager = stager_class(ctx)(ctx, rng, workdir)
    stager.lookup = FakeSchemaRegistry.avro(IDS)
    for offset, value in enumerate(values):
        stager.add(FakeMessage(TOPIC, 0, offset, value, b"k", [], 1_726_238_205_000 + offset))
    store = staging.open()
    return stager, stager.commit(store, rng.end_exclusive), store


def read(store, name: str) -> tuple[dict, list[dict]]:
    reader = fastavro.reader(io.BytesIO(store.read_bytes(name)))
    return reader.writer_schema, list(reader)


def by_table(result) -> dict[str, str]:
    return {parse_name(n).key.table: n for n, _ in result.files}


def rows_of(store, result, table: str) -> list[dict]:
    """Every row staged for ``table``, across its files (one per schema id), by offset."""
    rows = [
        row
        for n, _ in result.files
        if parse_name(n).key.table == table
        for row in read(store, n)[1]
    ]
    return sorted(rows, key=lambda row: row["_kafka_offset"])


def test_one_avro_message_lands_once_in_each_destination_with_its_own_fields_and_schema_id(
    tmp_path: Path,
) -> None:
    stager, result, store = stage(tmp_path, [framed(7, execution(i)) for i in range(4)], config())
    assert isinstance(stager, TransformRangeStager)
    assert NativeStaging.for_stager(stager) is None  # never the native kernel nor slicing
    assert (result.messages, result.records, result.dead_letters) == (4, 8, {})
    files = by_table(result)
    assert sorted(files) == ["executions", "fills_by_symbol"]
    whole_schema, whole = read(store, files["executions"])
    fills_schema, fills = read(store, files["fills_by_symbol"])
    assert (
        [r["_kafka_offset"] for r in whole] == [r["_kafka_offset"] for r in fills] == [0, 1, 2, 3]
    )
    # The whole destination: every field as produced, under the writer schema's declared id.
    assert (
        whole[1]["exec_id"] == "E1" and whole[1]["last_qty"] == "2" and whole[1]["venue"] == "XPAR"
    )
    assert parse_name(files["executions"]).key.schema_id == declared_schema_id(SCHEMA)
    # The projected one: its transforms applied, only its fields (in its order), its own id.
    projected = {k: v for k, v in fills[1].items() if not k.startswith("_")}
    assert projected == {"symbol": "ACME", "last_qty": 2.0, "last_px": 2.5, "notional": 5.0}
    output = stager.fan_out.schemas[7].branches[1].compiled.output_schema
    assert [f["name"] for f in output["fields"]] == ["symbol", "last_qty", "last_px", "notional"]
    assert parse_name(files["fills_by_symbol"]).key.schema_id == declared_schema_id(output)
    assert [f["name"] for f in fills_schema["fields"]] == [
        f["name"] for f in extended_schema(output, stager.enrichment)["fields"]
    ]
    # Both rows carry the message's event date, though the projection dropped transact_time.
    assert {str(r["_event_date"]) for r in whole + fills} == {"2024-09-13"}
    assert [f["name"] for f in whole_schema["fields"] if not f["name"].startswith("_")] == [
        f["name"] for f in SCHEMA["fields"]
    ]


def test_the_topic_transforms_apply_once_before_each_destinations_own(tmp_path: Path) -> None:
    pipeline = config(
        transforms=[{"rename": "symbol", "to": "ticker"}],
        destinations=[WHOLE, {**FILLS, "fields": ["ticker", "notional"]}],
    )
    _, result, store = stage(tmp_path, [framed(7, execution(3))], pipeline)
    files = by_table(result)
    [whole] = read(store, files["executions"])[1]
    [fill] = read(store, files["fills_by_symbol"])[1]
    assert "symbol" not in whole and whole["ticker"] == "ACME"
    assert (fill["ticker"], fill["notional"]) == ("ACME", 10.0) and "last_px" not in fill


def test_each_destination_routes_its_own_records(tmp_path: Path) -> None:
    by_symbol = {
        "routing": {"mode": "fields", "dataset_field": "ds", "table_field": "symbol"},
        "transforms": [{"add": "ds", "value": "routed"}],
        "fields": ["exec_id"],
    }
    _, result, store = stage(
        tmp_path, [framed(7, execution(i)) for i in range(3)], config([WHOLE, by_symbol])
    )
    tables = {parse_name(n).key.table: n for n, _ in result.files}
    assert sorted(tables) == ["ACME", "GOOG", "executions"]
    assert [r["exec_id"] for r in read(store, tables["GOOG"])[1]] == ["E0", "E2"]
    assert parse_name(tables["ACME"]).key.dataset == "routed"


def test_a_message_failing_one_destination_is_dead_lettered_once_and_staged_nowhere(
    tmp_path: Path,
) -> None:
    values = [
        framed(7, execution(0)),
        framed(7, execution(1, last_qty="twelve")),
        framed(7, execution(2)),
    ]
    _, result, store = stage(tmp_path, values, config())
    assert (result.messages, result.records) == (3, 4)
    assert result.dead_letters == {"transform_failed": 1}
    files = by_table(result)
    for table in ("executions", "fills_by_symbol"):  # offset 1 in neither: never partial
        assert [r["_kafka_offset"] for r in read(store, files[table])[1]] == [0, 2]
    [letter] = read(store, files["dead_letters"])[1]
    assert (letter["offset"], letter["reason"], letter["raw_value"]) == (
        1,
        "transform_failed",
        values[1],
    )
    assert (
        "fix.executions[0] offset 1: destinations[1] (fix.fills_by_symbol): transforms[0] "
        "(cast) field 'last_qty': 'twelve' is not a double"
    ) in letter["error"]


def test_an_unroutable_destination_dead_letters_the_whole_message(tmp_path: Path) -> None:
    by_field = {
        "routing": {"mode": "fields", "dataset_field": "ds", "table_field": "symbol"},
        "transforms": [{"add": "ds", "value": "nowhere"}],
    }
    _, result, store = stage(tmp_path, [framed(7, execution(0))], config([WHOLE, by_field]))
    assert result.records == 0 and result.dead_letters == {"destination_not_allowed": 1}
    [letter] = read(store, by_table(result)["dead_letters"])[1]
    assert "destinations[1] (routing fields): " in letter["error"]
    assert "destination nowhere.GOOG is not in the allow-list" in letter["error"]


def test_two_destinations_routing_one_message_to_one_table_is_unroutable(tmp_path: Path) -> None:
    same = {
        "routing": {"mode": "fields", "dataset_field": "ds", "table_field": "t"},
        "transforms": [{"add": "ds", "value": "fix"}, {"add": "t", "value": "executions"}],
    }
    pipeline = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "destinations": [WHOLE, same],
                    "event_time": {"fields": ["transact_time"]},
                }
            ],
            "allowed_destinations": ["fix.*"],
        }
    )
    _, result, store = stage(tmp_path, [framed(7, execution(0))], pipeline)
    assert result.records == 0 and result.dead_letters == {"unroutable": 1}
    [letter] = read(store, by_table(result)["dead_letters"])[1]
    assert (
        "destinations[0] (fix.executions) and destinations[1] (routing fields) both route "
        "to fix.executions"
    ) in letter["error"]


def test_a_schema_one_destination_cannot_project_dead_letters_its_messages_asking_once(
    tmp_path: Path,
) -> None:
    values = [
        framed(8, {"exec_id": "E0", "transact_time": "2024-09-13T14:30:00Z"}),
        framed(7, execution(1)),
        framed(8, {"exec_id": "E2", "transact_time": "2024-09-13T14:30:00Z"}),
    ]
    stager, result, store = stage(
        tmp_path,
        values,
        config([WHOLE, {**FILLS, "transforms": [], "fields": ["symbol", "last_px"]}]),
    )
    assert result.records == 2 and result.dead_letters == {"transform_failed": 2}
    assert stager.lookup.asked == [8, 7]
    files = by_table(result)
    assert [r["_kafka_offset"] for r in read(store, files["executions"])[1]] == [1]
    errors = [letter["error"] for letter in read(store, files["dead_letters"])[1]]
    assert all(
        "destinations[1] (fix.fills_by_symbol): fields[0] 'symbol': not a field" in e
        for e in errors
    ), errors


def test_one_commit_covers_every_destinations_files(tmp_path: Path) -> None:
    values = [framed(7, execution(0)), framed(7, execution(1, last_qty="x"))]
    _, result, store = stage(tmp_path, values, config())
    avro = sorted(n for n, _ in result.files)
    assert len(avro) == 3  # two destinations and the dead letters, one range
    assert {parse_name(n).key.schema_id for n in avro} >= {DEAD_LETTER_SCHEMA_ID}
    done = sorted(f.name for f in store.list(TOPIC) if f.name.endswith(".done"))
    manifests = [parse_manifest(store.read_bytes(name), name) for name in done]
    assert len(done) == 3 and all(m == manifests[0] for m in manifests)
    assert sorted(f.avro for f in manifests[0].files) == avro  # every file pinned by each done
    assert (manifests[0].first, manifests[0].last, manifests[0].records) == (0, 1, 3)


def test_json_topics_fan_out_through_the_same_step(tmp_path: Path) -> None:
    pipeline = config(format="json", schema=SCHEMA)
    stager, result, store = stage(
        tmp_path, [json.dumps(execution(4)).encode(), b'{"exec_id": 1}'], pipeline
    )
    assert isinstance(stager, JsonRangeStager)
    assert result.records == 2 and result.dead_letters == {"json_schema_mismatch": 1}
    [fill] = read(store, by_table(result)["fills_by_symbol"])[1]
    assert (fill["symbol"], fill["notional"]) == ("GOOG", 12.5)


def test_decoder_topics_fan_out_after_the_decoders_own_check(tmp_path: Path) -> None:
    """FIX: every message whole by its schema's name, and the fields common to both message
    types projected into one table of order events."""
    events = {
        "routing": {"mode": "static", "dataset": "fix", "table": "order_events"},
        "fields": ["cl_ord_id", "msg_type", "symbol", "side"],
    }
    pipeline = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "decoder",
                    "decoder": "examples.fix.decoder:decode_fix",
                    "destinations": [
                        {"routing": {"mode": "schema_name", "dataset": "fix"}},
                        events,
                    ],
                    "event_time": {"fields": ["transact_time", "sending_time"], "date_rule": "utc"},
                }
            ],
            "allowed_destinations": ["fix.new_order_single", "fix.execution_report"],
        }
    )
    flow = [sample.value for sample in order_flow(2, seed=7)]
    stager, result, store = stage(tmp_path, flow, pipeline)
    assert isinstance(stager, DecoderRangeStager)
    assert result.dead_letters == {} and result.records == 2 * len(flow)
    assert sorted(by_table(result)) == ["execution_report", "new_order_single", "order_events"]
    events_rows = rows_of(store, result, "order_events")  # one file per message type's schema
    assert [r["_kafka_offset"] for r in events_rows] == list(range(len(flow)))
    assert [{k: v for k, v in r.items() if not k.startswith("_")} for r in events_rows[:2]] == [
        {"cl_ord_id": "C000000", "msg_type": "D", "symbol": "GOOG", "side": "1"},
        {"cl_ord_id": "C000000", "msg_type": "8", "symbol": "GOOG", "side": "1"},
    ]
    whole = rows_of(store, result, "new_order_single") + rows_of(store, result, "execution_report")
    assert sorted(r["_kafka_offset"] for r in whole) == list(range(len(flow)))
    assert "order_qty" in rows_of(store, result, "new_order_single")[0]


@pytest.mark.parametrize("missing_key", [True])
def test_a_missing_hmac_key_of_a_destination_stops_the_range_naming_its_key_path(
    tmp_path: Path,
    monkeypatch,
    missing_key: bool,
) -> None:
    from kbqe_dagster.core.errors import ConfigError

    monkeypatch.delenv("KBQE_TEST_DEST_KEY", raising=False)
    masked = {
        **FILLS,
        "transforms": [{"mask": "symbol", "key_env": "KBQE_TEST_DEST_KEY"}],
        "fields": ["symbol"],
    }
    with pytest.raises(
        ConfigError,
        match=r"topics\[0\]\.destinations\[1\]\.transforms\[0\]"
        r"\.key_env: environment variable KBQE_TEST_DEST_KEY",
    ):
        stage(tmp_path, [framed(7, execution(0))], config([WHOLE, masked]))


FILLS_ONLY = {
    "routing": {"mode": "static", "dataset": "fix", "table": "fills_by_symbol"},
    "schema_names": ["fix.ExecutionReport"],
    "when": 'exec_type == "F"',
    "fields": ["symbol", "side", "last_qty", "last_px", "transact_time"],
}


def fix_pipeline(*destinations):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "decoder",
                    "decoder": "examples.fix.decoder:decode_fix",
                    "destinations": [
                        {"routing": {"mode": "schema_name", "dataset": "fix"}},
                        *destinations,
                    ],
                    "event_time": {"fields": ["transact_time", "sending_time"], "date_rule": "utc"},
                }
            ],
            "allowed_destinations": ["fix.new_order_single", "fix.execution_report"],
        }
    )


def test_a_destination_takes_only_the_schemas_and_records_it_names(tmp_path: Path) -> None:
    """FIX: every message whole by type; only the fills (ExecutionReport, ExecType F), whose
    schema the other type lacks fields of, projected into fills_by_symbol."""
    flow = [sample.value for sample in order_flow(3, seed=7)]  # D, 8 (new), 8 (fill) each
    stager, result, store = stage(tmp_path, flow, fix_pipeline(FILLS_ONLY))
    assert result.dead_letters == {} and result.records == len(flow) + 3
    fills = rows_of(store, result, "fills_by_symbol")
    assert [r["_kafka_offset"] for r in fills] == [2, 5, 8]  # the third of each order
    assert all(r["last_qty"] > 0 for r in fills)
    assert set(fills[0]) - {f["name"] for f in fills_schema_enrichment(stager)} == {
        "symbol",
        "side",
        "last_qty",
        "last_px",
        "transact_time",
    }
    # The NewOrderSingle schema was never compiled for the fills (it lacks last_qty).
    [fanned_d] = [
        f
        for f in stager.fan_out.schemas.values()
        if f.branches[0].full_name == "fix.NewOrderSingle"
    ]
    assert fanned_d.branches[1] is None


def fills_schema_enrichment(stager) -> list[dict]:
    return extended_schema({"type": "record", "name": "x", "fields": []}, stager.enrichment)[
        "fields"
    ]


def test_a_message_no_destination_takes_is_unroutable_never_dropped(tmp_path: Path) -> None:
    pipeline = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "decoder",
                    "decoder": "examples.fix.decoder:decode_fix",
                    "destinations": [FILLS_ONLY],
                    "event_time": {"fields": ["transact_time"], "date_rule": "utc"},
                }
            ],
        }
    )
    flow = [sample.value for sample in order_flow(1, seed=7)]
    _, result, store = stage(tmp_path, flow, pipeline)
    assert result.records == 1 and result.dead_letters == {"unroutable": 2}
    errors = sorted(x["error"] for x in read(store, by_table(result)["dead_letters"])[1])
    assert "offset 0: no destination takes records of schema fix.NewOrderSingle" in errors[0]
    assert (
        "offset 1: no destination takes this record (each destination's when is false)" in errors[1]
    )


def test_a_when_that_is_not_true_or_false_fails_the_message_naming_the_destination(
    tmp_path: Path,
) -> None:
    odd = {**FILLS_ONLY, "when": "last_qty"}  # a number, not a boolean
    flow = [sample.value for sample in order_flow(1, seed=7)]
    _, result, store = stage(tmp_path, flow, fix_pipeline(odd))
    assert result.dead_letters == {"transform_failed": 2}
    assert [r["_kafka_offset"] for r in rows_of(store, result, "new_order_single")] == [0]
    assert rows_of(store, result, "execution_report") == []  # all or nothing
    [first, _] = read(store, by_table(result)["dead_letters"])[1]
    assert (
        "destinations[1] (fix.fills_by_symbol): when 'last_qty' gave 0.0, not true or false"
        in first["error"]
    )


def test_json_schema_topics_fan_out_through_the_same_step(tmp_path: Path) -> None:
    from kbqe_dagster.formats.json_schema_stage import JsonSchemaRangeStager
    from kbqe_dagster_tests.support import json_schema_format as js

    pipeline = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": js.TOPIC,
                    "format": "json_schema",
                    "event_time": {"fields": ["placed_at"]},
                    "destinations": [
                        {"routing": {"mode": "fields"}},  # datasetName/tableName of each record
                        {
                            "routing": {"mode": "static", "dataset": "shop", "table": "order_ids"},
                            "fields": ["id", "placed_at"],
                        },
                    ],
                }
            ],
            "allowed_destinations": ["shop.*"],
        }
    )
    values = [js.framed("v1", js.GOOD), js.framed("v1", {**js.GOOD, "id": 0})]  # id < 1: bad
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        pipeline,
        js.TOPIC,
    )
    stager = stager_class(ctx)(ctx, OffsetRange(js.TOPIC, 0, 0, 2), tmp_path)
    assert isinstance(stager, JsonSchemaRangeStager)
    stager.lookup = js.fake_registry()
    for offset, value in enumerate(values):
        stager.add(FakeMessage(js.TOPIC, 0, offset, value, b"k", [], 1_726_238_205_000))
    store = staging.open()
    result = stager.commit(store, 2)
    assert result.records == 2 and result.dead_letters == {"json_schema_mismatch": 1}
    assert sorted(by_table(result)) == ["dead_letters", "order_ids", "orders"]
    [ids] = rows_of(store, result, "order_ids")
    assert {k: v for k, v in ids.items() if not k.startswith("_")} == {
        "id": 1,
        "placed_at": rows_of(store, result, "orders")[0]["placed_at"],
    }
    assert str(ids["_event_date"]) == "2024-09-13"
