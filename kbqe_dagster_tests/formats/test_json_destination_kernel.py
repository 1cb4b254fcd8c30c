"""``format: json`` topics with ``destinations`` on the native kernel stage exactly what the
Python path stages (formats/destination_stage.py, the reference): the kernel encodes each
value as declared (json.rs), then builds every destination's record from the body's top-level
field spans (formats/json_stage.py ``JsonDestinationKernelStaging``, kernel/src/destinations.rs).
The seeded differential fuzz (``json_destination_fuzz``) draws random destinations over the
JSON kernel's random schemas and values."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.formats.json_destination_fuzz import scenario
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV
from kbqe_dagster_tests.staging.kernel_equality import (
    SCENARIO_MESSAGES,
    FuzzTally,
    Msg,
    assert_same,
    fuzz_seeds,
    stage,
)

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "add_json_destinations"):
    pytest.skip(
        "the installed kernel predates JSON destinations (make install)", allow_module_level=True
    )

TOPIC = "fix.executions"
SCHEMA = {
    "type": "record", "name": "Execution", "namespace": "fix",
    "fields": [
        {"name": "at", "type": "long"},
        {"name": "symbol", "type": "string"},
        {"name": "qty", "type": "long"},
        {"name": "venue", "type": ["null", "string"], "default": None},
    ],
}  # fmt: skip


def pipeline(destinations: list[dict], transforms: list[dict] | None = None):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{
            "name": TOPIC, "format": "json", "schema": SCHEMA,
            "event_time": {"fields": ["at"], "epoch_unit": "ms"},
            "transforms": transforms or [], "destinations": destinations,
        }],
        "allowed_destinations": ["fix.*"],
    }, source="test")  # fmt: skip


def static(table: str, **destination: Any) -> dict:
    return {"routing": {"mode": "static", "dataset": "fix", "table": table}, **destination}


def value(offset: int, **record: Any) -> Msg:
    base = {"at": 1_726_238_205_123, "symbol": "ACME", "qty": 100 + offset, **record}
    return Msg(TOPIC, 0, offset, json.dumps(base).encode())


def records(staged, table: str) -> list[dict]:
    out = []
    for name, data in sorted(staged.files.items()):
        if name.endswith(".avro") and f".0.fix.{table}." in name:  # topic.partition.dataset.table
            out += [{k: v for k, v in r.items() if not k.startswith("_")}
                    for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    return out


def test_json_destinations_with_projections_transforms_and_an_absent_default(tmp_path):
    """Two tables in their own field orders, one with its own cast, rename and constant; a
    value without ``venue`` (its default) and one that does not fit (Python's dead letter)."""
    config = pipeline(
        [
            static("executions"),
            static("fills", transforms=[{"cast": "qty", "to": "string"},
                                        {"rename": "qty", "to": "quantity"},
                                        {"add": "desk", "value": "eq"}],
                   fields=["desk", "quantity", "venue"]),
        ],
        transforms=[{"add": "source", "value": "kafka"}],
    )  # fmt: skip
    messages = [value(0, venue="XPAR"), value(1), value(2, qty="x"), value(3, venue=None)]
    python = stage(tmp_path, config, TOPIC, {}, messages, native=False)
    native = stage(tmp_path, config, TOPIC, {}, messages, native=True)
    assert_same(python, native)
    assert native.kernel_messages == 3
    assert python.result is not None and python.result.dead_letters == {"json_schema_mismatch": 1}
    assert records(python, "fills")[:2] == [
        {"desk": "eq", "quantity": "100", "venue": "XPAR"},
        {"desk": "eq", "quantity": "101", "venue": None},
    ]
    assert list(records(python, "executions")[0]) == ["at", "symbol", "qty", "venue", "source"]


def test_json_destinations_with_their_own_hmac_mask_and_a_topic_null_mask(tmp_path, monkeypatch):
    """The topic nulls ``venue``: ``fills`` keeps it first, ``symbols`` leaves it out;
    ``masked`` hmacs ``symbol`` with its own key. Every value the kernel's, every table the
    Python path's."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "dest-key")
    config = pipeline(
        [
            static("fills", fields=["venue", "qty"]),
            static("symbols", fields=["symbol"]),
            static("masked", transforms=[{"mask": "symbol", "key_env": FUZZ_HMAC_ENV}]),
        ],
        transforms=[{"mask": "venue", "method": "null"}],
    )  # fmt: skip
    messages = [value(0, venue="XPAR"), value(1), value(2, venue=None)]
    python = stage(tmp_path, config, TOPIC, {}, messages, native=False)
    native = stage(tmp_path, config, TOPIC, {}, messages, native=True)
    assert_same(python, native)
    assert native.kernel_messages == 3 and not native.handbacks
    assert records(python, "fills")[0] == {"venue": None, "qty": 100}
    assert records(python, "symbols")[0] == {"symbol": "ACME"}
    assert records(python, "masked")[0]["symbol"] != "ACME"


def test_json_destinations_with_a_header_projected_first_and_the_offset_left_out(tmp_path):
    """The topic adds a header and the offset: ``traces`` lists the header first and leaves
    the offset out, ``all`` has both last in transform order."""
    config = pipeline(
        [static("traces", fields=["trace", "qty"]), static("all")],
        transforms=[{"add": "off", "message": "offset"}, {"add": "trace", "header": "trace-id"}],
    )  # fmt: skip
    messages = [
        Msg(m.topic(), 0, m.offset(), m.value(), None, headers)
        for m, headers in zip([value(i) for i in range(3)],
                              [[("trace-id", b"one")], None, [("trace-id", b"x"), ("trace-id", b"y")]])
    ]  # fmt: skip
    python = stage(tmp_path, config, TOPIC, {}, messages, native=False)
    native = stage(tmp_path, config, TOPIC, {}, messages, native=True)
    assert_same(python, native)
    assert native.kernel_messages == 3 and not native.handbacks
    assert [r["trace"] for r in records(python, "traces")] == ["one", None, "y"]
    assert list(records(python, "traces")[0]) == ["trace", "qty"]
    assert list(records(python, "all")[0])[-2:] == ["off", "trace"]


def test_differential_fuzz(tmp_path_factory, pytestconfig, monkeypatch):
    """Seeded random static and schema-name destinations, projections and their own
    transforms over the JSON kernel fuzz's schemas and values: identical commits. A JSON topic
    has one schema: when the kernel refuses it, the whole range is the Python path's (no
    driver), and that scenario has nothing to compare (counted apart). The transforms drawn
    may mask with hmac (the key a stage task reads where it runs)."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally, python_only = FuzzTally(), 0
    for seed in fuzz_seeds(pytestconfig):
        case = scenario(seed, SCENARIO_MESSAGES)
        tmp = tmp_path_factory.mktemp(f"jsondestfuzz{seed}")
        ctx = StageContext(KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"),
                           StagingLocation(str(tmp / "probe")), case.pipeline, "fuzz.json",
                           native_kernel=True)  # fmt: skip
        stager = stager_class(ctx)(ctx, OffsetRange("fuzz.json", 0, 0, 1), tmp / "probe")
        if NativeStaging.for_stager(stager) is None:
            python_only += 1
            continue
        inputs = (tmp, case.pipeline, "fuzz.json", {}, case.messages)
        python = stage(*inputs, native=False)
        batch = random.Random(seed).choice([1, 7, 64, 1000])
        native = stage(*inputs, native=True, batch_size=batch)
        assert_same(python, native, f"seed {seed}")
        tally.add(case, python, native)
    print(tally.summary("jsondest"))
    staged = tally.natively + sum(tally.handed_back_records.values())
    share = tally.natively / max(staged, 1)
    print(f"json destinations: {tally.scenarios} scenarios compared ({python_only} left to the "
          f"Python path whole), {tally.natively} of {staged} staged messages by the kernel "
          f"({share:.1%}), {tally.records} records, {tally.messages} messages")  # fmt: skip
    assert tally.scenarios > python_only, "the kernel took too few scenarios to prove anything"
    assert share > 0.5, "the kernel staged too few messages to prove anything"
