"""Confluent Avro with ``transforms`` on the native kernel stages exactly what the Python path
stages (formats/transform_stage.py, the reference: fastavro decode → transforms → encode).

The kernel copies the body's bytes reshaped (formats/avro_transform_kernel.py), so it may only
take a body whose fastavro round trip is the identity: each canonical-form rule below is pinned
by a body that breaks it, staged both ways (identical commits) and handed back by the kernel,
next to the same record written canonically, which the kernel stages itself. The seeded
differential fuzz (``avro_transform_fuzz``) draws random schemas, encodings (non-canonical ones
among them) and transforms; ``--kernel-fuzz-cases 1000000`` runs a million messages.
"""

from __future__ import annotations

import decimal
import hmac
import io
import itertools
import struct
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.transforms.kernel_transforms import KernelTransforms, kernel_transforms
from kbqe_dagster.core.transforms.specs import AddField, CastField, CastType, DropFields
from kbqe_dagster.formats.avro_destination_kernel import AvroDestinationKernelStaging
from kbqe_dagster.formats.avro_transform_kernel import AvroTransformKernelStaging
from kbqe_dagster.formats.transform_stage import TransformRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_for
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.formats.avro_transform_fuzz import scenario, zigzag
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV
from kbqe_dagster_tests.staging.hourly_fuzz import needs_hour_kernel, with_hour_tables
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, differential_fuzz, stage

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "add_transformed_schema"):
    pytest.skip(
        "the installed kernel predates Avro transforms (make install)", allow_module_level=True
    )

REWRITES = getattr(kernel.StageKernel, "AVRO_REWRITES", False)
needs_rewrites = pytest.mark.skipif(
    not REWRITES, reason="the installed kernel predates Avro masks and timestamps (make install)"
)

TOPIC = "avro.tx"
SCHEMA_ID = 5


def pipeline(field_type: Any, transforms: list[dict] | None = None, **topic: Any):
    """One topic routed statically, event time from ``at``; a field ``f`` of ``field_type``
    next to ``n`` (a long, dropped by default) and ``s`` (a string, cast to itself)."""
    return parse_pipeline_config({
        "version": 1,
        "topics": [{
            "name": TOPIC,
            "event_time": {"fields": ["at"], "epoch_unit": "ms"},
            "routing": {"mode": "static", "dataset": "acme", "table": "events"},
            "transforms": transforms if transforms is not None else [
                {"drop": ["n"]}, {"rename": "s", "to": "text"},
                {"add": "source", "value": "kafka"},
            ],
            **topic,
        }],
        "allowed_destinations": ["acme.*"],
    }, source="test")  # fmt: skip


def schema(field_type: Any) -> dict:
    return {
        "type": "record", "name": "Event", "namespace": "test",
        "fields": [
            {"name": "at", "type": "long"},
            {"name": "n", "type": "long"},
            {"name": "f", "type": field_type},
            {"name": "s", "type": "string"},
        ],
    }  # fmt: skip


def framed(body: bytes) -> bytes:
    return b"\x00" + SCHEMA_ID.to_bytes(4, "big") + body


def head() -> bytes:
    """``at`` and ``n`` of every test record."""
    return zigzag(1_726_238_205_123) + zigzag(300)


def canonical(field_type: Any, value: Any) -> bytes:
    out = io.BytesIO()
    record = {"at": 1_726_238_205_123, "n": 300, "f": value, "s": "x"}
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema(field_type)), record)
    return out.getvalue()


def staged_both_ways(tmp_path, field_type: Any, bodies: list[bytes], transforms=None):
    messages = [Msg(TOPIC, 0, i, framed(body)) for i, body in enumerate(bodies)]
    config = pipeline(field_type, transforms)
    schemas = {SCHEMA_ID: schema(field_type)}
    python = stage(tmp_path, config, TOPIC, schemas, messages, native=False)
    native = stage(tmp_path, config, TOPIC, schemas, messages, native=True)
    assert_same(python, native)
    return python, native


S = zigzag(1) + b"x"  # the string "x" of field s

# (name, field type, a canonical value, a body of the same schema fastavro re-encodes otherwise)
NON_CANONICAL = [
    ("over-long varint", "long", 5, head() + b"\x8a\x00" + S),
    ("over-long string length", "string", "ab", head() + b"\x84\x00ab" + S),
    ("over-long union index", ["null", "long"], 5, head() + b"\x82\x00\x0a" + S),
    ("array in two blocks", {"type": "array", "items": "int"}, [1, 2],
     head() + b"\x02\x02\x02\x04\x00" + S),
    ("array block with a byte size", {"type": "array", "items": "int"}, [1],
     head() + b"\x01\x02\x02\x00" + S),
    ("map in two blocks", {"type": "map", "values": "int"}, {"a": 1, "b": 2},
     head() + b"\x02\x02a\x02\x02\x02b\x04\x00" + S),
    ("map with a duplicate key", {"type": "map", "values": "int"}, {"a": 2},
     head() + b"\x04\x02a\x02\x02a\x04\x00" + S),
    ("upper-case uuid", {"type": "string", "logicalType": "uuid"},
     "abcdef01-2345-6789-abcd-ef0123456789",
     head() + zigzag(36) + b"ABCDEF01-2345-6789-abcd-ef0123456789" + S),
    ("float32 signalling NaN", "float", 1.5, head() + struct.pack("<I", 0x7FA00000) + S),
    ("negative time-millis", {"type": "int", "logicalType": "time-millis"}, None,
     head() + zigzag(-1000) + S),
    ("negative time-micros", {"type": "long", "logicalType": "time-micros"}, None,
     head() + zigzag(-1) + S),
    # (fastavro writes 7 under the int branch: a value read under long may be an int)
    ("long branch after an int branch", ["null", "int", "long"], None,
     head() + b"\x04\x0e" + S),
    ("float branch where the writer prefers double", ["null", "float", "double"], None,
     head() + b"\x02" + struct.pack("<f", 0.5) + S),
]  # fmt: skip


@pytest.mark.parametrize("field_type,value,body", [c[1:] for c in NON_CANONICAL],
                         ids=[c[0] for c in NON_CANONICAL])  # fmt: skip
def test_an_encoding_fastavro_rewrites_is_handed_back(tmp_path, field_type, value, body):
    """The Python path writes what fastavro re-encodes; the kernel hands such a body back
    (identical commits), while the canonical body of a value of the same type it stages."""
    bodies = [body] if value is None else [canonical(field_type, value), body]
    python, native = staged_both_ways(tmp_path, field_type, bodies)
    assert python.result is not None and python.result.records == len(bodies)
    assert native.kernel_messages == len(bodies) - 1
    assert native.handbacks == {"transform_uncertain": 1}


CANONICAL = [
    ("long", -(2**63)),
    ("int", 2**31 - 1),
    ("boolean", True),
    ("bytes", b"\x00\xff"),
    ("string", "Zürich 🎉"),
    ({"type": "fixed", "name": "F", "size": 3}, b"abc"),
    ({"type": "enum", "name": "E", "symbols": ["a", "b"]}, "b"),
    ({"type": "array", "items": "string"}, ["a", "b", "c"]),
    ({"type": "array", "items": "string"}, []),
    ({"type": "map", "values": "long"}, {"b": 1, "a": 2}),
    ({"type": "string", "logicalType": "uuid"}, "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8e"),
    ({"type": "int", "logicalType": "time-millis"}, 86_399_999),
    ({"type": "long", "logicalType": "time-micros"}, 0),
    ({"type": "int", "logicalType": "date"}, -719_162),
    ({"type": "long", "logicalType": "timestamp-micros"}, 253_402_300_799_999_999),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, -62_135_596_800_000),
    ("float", float("nan")),
    ("double", float("-inf")),
    (["null", "string"], None),
    (["string", "null"], "x"),
    (["null", "int", "long"], None),
    ({"type": "record", "name": "In", "fields": [{"name": "x", "type": ["null", "In"]}]},
     {"x": {"x": None}}),
    # A union's only non-null branch: fastavro's writer validates the decoded value against it.
    (["null", {"type": "string", "logicalType": "uuid"}], "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8e"),
    (["null", {"type": "int", "logicalType": "date"}], 19_979),
    (["null", {"type": "int", "logicalType": "time-millis"}], 1),
    (["null", {"type": "long", "logicalType": "timestamp-millis"}], 1_726_238_205_123),
    (["null", {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}],
     decimal.Decimal("-12.34")),
    (["null", {"type": "fixed", "name": "G", "size": 1}], b"z"),
    (["null", {"type": "enum", "name": "H", "symbols": ["a"]}], "a"),
    (["null", {"type": "map", "values": "float"}], {"k": float("nan")}),
    (["null", {"type": "array", "items": "double"}], [0.1]),
    (["null", "float"], 0.5),
    (["null", "boolean"], False),
]  # fmt: skip


@pytest.mark.parametrize("field_type,value", CANONICAL, ids=[repr(c[0])[:40] for c in CANONICAL])
def test_a_canonical_body_is_staged_by_the_kernel(tmp_path, field_type, value):
    python, native = staged_both_ways(tmp_path, field_type, [canonical(field_type, value)])
    assert python.result is not None and python.result.records == 1
    assert native.kernel_messages == 1


DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 2}
FIXED_DECIMAL = {"type": "fixed", "name": "D", "size": 2, "logicalType": "decimal",
                 "precision": 3, "scale": 1}  # fmt: skip


@pytest.mark.parametrize(
    "field_type,raw,kernel_stages",
    [
        (DECIMAL, b"\x7f", True),  # 1.27
        (DECIMAL, b"\xff\x80", True),  # -1.28: fastavro's width for it (not the shortest)
        (DECIMAL, b"\x80", False),  # -1.28 in one byte: written back in two
        (DECIMAL, b"\x00\x7f", False),  # a leading byte fastavro does not write
        (DECIMAL, b"", False),  # 0: written back as one byte
        (DECIMAL, b"\x03\xe8", True),  # 1000 (10.00): three digits once zeros are stripped
        (DECIMAL, b"\x03\xe9", False),  # 1001: four digits, read rounded to three
        (FIXED_DECIMAL, b"\xff\xff", True),  # -0.1
        (FIXED_DECIMAL, b"\x03\xe9", False),  # 100.1: rounded to three digits
    ],
)
def test_a_decimal_fastavro_writes_back_otherwise_is_handed_back(
    tmp_path, field_type, raw, kernel_stages
):
    """fastavro reads a decimal rounded to its precision and writes a ``bytes`` one in its own
    width: the kernel stages exactly the spellings that survive that round trip."""
    spelled = raw if field_type is FIXED_DECIMAL else zigzag(len(raw)) + raw
    python, native = staged_both_ways(tmp_path, field_type, [head() + spelled + S])
    assert python.result is not None and python.result.records == 1
    assert native.kernel_messages == (1 if kernel_stages else 0)


def test_casts_to_digits_and_the_nullable_ones(tmp_path):
    transforms = [{"cast": "n", "to": "string"}, {"cast": "f", "to": "string"}]
    bodies = [canonical(["null", "long"], v) for v in (None, 0, -1, 2**63 - 1, -(2**63))]
    python, native = staged_both_ways(tmp_path, ["null", "long"], bodies, transforms)
    assert python.result is not None and python.result.records == 5
    assert native.kernel_messages == 5


def test_malformed_bodies_are_the_python_paths_dead_letters(tmp_path):
    good = canonical("long", 5)
    bodies = [good[:-1], good + b"\x00", head() + b"\x80" * 11 + S, good]
    python, native = staged_both_ways(tmp_path, "long", bodies)
    assert python.result is not None and python.result.dead_letters == {"body_decode_error": 3}
    assert native.kernel_messages == 1


def test_routing_or_event_time_reading_a_transformed_name_stays_on_the_python_path():
    """``kernel_transforms`` refuses them (the Python path reads the transformed record); for
    Avro (``complete``: every field is decoded) a field's default does not matter."""
    declared = schema("long")
    declared["fields"][1]["default"] = 7
    assert kernel_transforms([DropFields(("at",))], declared, ["at"], complete=True) is None
    assert kernel_transforms([DropFields(("n",))], declared, ["at"], complete=True) == (
        KernelTransforms(("n",))
    )
    cast = [CastField("n", CastType.STRING), AddField("k", value=1)]
    assert kernel_transforms(cast, declared, ["at"]) is None  # JSON: n may be absent
    assert kernel_transforms(cast, declared, ["at"], complete=True) == KernelTransforms(
        (), (("k", 1),), ("n",)
    )


@pytest.mark.parametrize(
    "transforms,topic,driver_class",
    [
        ([{"drop": ["n"]}, {"cast": "f", "to": "string"}], {}, AvroTransformKernelStaging),
        ([{"drop": ["n"]}], {"destinations": [
            {"routing": {"mode": "static", "dataset": "acme", "table": "events"}}]},
         AvroDestinationKernelStaging),
        ([{"drop": ["n"]}], {"destinations": [
            {"routing": {"mode": "static", "dataset": "acme", "table": "events"},
             "when": "n > 1"}]}, None),
        ([{"drop": ["n"]}, {"mask": "s", "method": None}], {},
         AvroTransformKernelStaging if REWRITES else None),
        ([{"add": "trace", "header": "trace-id"}], {},
         AvroTransformKernelStaging if REWRITES else None),
        ([{"timestamp": "s", "to": "string"}], {}, None),
    ],
    ids=["kernel kinds", "destinations", "a when", "a mask", "a header",
         "a timestamp to a string"],
)  # fmt: skip
def test_topics_with_kernel_kinds_take_the_kernel_destinations_with_their_own_driver(
    tmp_path, transforms, topic, driver_class
):
    """Transforms of the kernel's kinds: the transforms driver; with destinations the
    kernel does (formats/avro_destination_kernel.py), the destinations driver; a ``when`` or a
    timestamp to a string: the Python path."""
    if "destinations" in topic:
        config = parse_pipeline_config(
            {"version": 1, "topics": [{"name": TOPIC, "transforms": transforms,
                                       "event_time": {"fields": ["at"], "epoch_unit": "ms"},
                                       "destinations": topic["destinations"]}],
             "allowed_destinations": ["acme.*"]}, source="test")  # fmt: skip
    else:
        config = pipeline("long", transforms, **topic)
    assert stager_for(config.topics[0]) is TransformRangeStager
    ctx = StageContext(KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"),
                       StagingLocation(str(tmp_path)), config, TOPIC, native_kernel=True)  # fmt: skip
    stager = TransformRangeStager(ctx, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
    driver = NativeStaging.for_stager(stager)
    assert type(driver) is driver_class if driver_class else driver is None


def test_differential_fuzz(tmp_path_factory, pytestconfig, monkeypatch):
    """Seeded random schemas, encodings (non-canonical ones among them) and kernel-able
    transforms (masks, timestamps and parts of the message among them), 400 messages each:
    identical commits on both paths."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "avrotx", "fuzz.events", scenario, pytestconfig, tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )  # fmt: skip
    assert tally.share > 0.4, "the kernel staged too few records to prove anything"


@needs_hour_kernel
def test_differential_fuzz_with_hour_tables(tmp_path_factory, pytestconfig, monkeypatch):
    """The same scenarios with some of their tables HOUR-partitioned: the event hour column
    and the hour counts of transformed records are the Python path's too."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "avrotxhour", "fuzz.events", with_hour_tables(scenario), pytestconfig, tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )  # fmt: skip
    assert tally.share > 0.4, "the kernel staged too few records to prove anything"


PRIMITIVE_VALUES = {  # a primitive type → the encodings of values read under it
    "boolean": [b"\x01"],
    "int": [zigzag(5)],
    "long": [zigzag(5), zigzag(2**40)],  # within an int's range and not
    "float": [struct.pack("<f", 0.5)],
    "double": [struct.pack("<d", 0.1)],
    "string": [zigzag(1) + b"x"],
    "bytes": [zigzag(1) + b"\x00"],
}


def test_unions_of_primitives_stage_exactly_the_branches_fastavro_picks_again(tmp_path):
    """Every ordering of null and two or three primitive types, every branch's values: the
    Python path writes each value under the branch fastavro's writer picks for the Python value
    (the first that validates it; a float's double over float); identical commits, and the
    kernel stages the branches that are certain (``Schema::unions``), such as each of
    ``["null", "string", "long"]``."""
    unions = [["null", *p] for n in (2, 3) for p in itertools.permutations(PRIMITIVE_VALUES, n)]
    staged = 0
    for number, union in enumerate(unions):
        bodies = [head() + zigzag(i) + value + S for i, t in enumerate(union)
                  for value in PRIMITIVE_VALUES.get(t, [b""])]  # fmt: skip
        python, native = staged_both_ways(tmp_path / str(number), union, bodies)
        assert python.result is not None and python.result.records == len(bodies), union
        staged += native.kernel_messages
        if union == ["null", "string", "long"]:
            assert native.kernel_messages == len(bodies)
    assert staged > len(unions)


HMAC_ENV = "KBQE_TEST_AVRO_KERNEL_HMAC_KEY"


def rewritten(tmp_path, field_type: Any, values: list[Any], transforms: list[dict],
              messages: list[dict] | None = None):  # fmt: skip
    """Records with ``f`` of ``field_type`` holding each of ``values`` (canonically encoded),
    staged both ways with ``transforms`` (``messages``: each message's key, headers or
    timestamp); the native run's records and their derived field types."""
    extra = messages or [{} for _ in values]
    msgs = [Msg(TOPIC, 0, i, framed(canonical(field_type, v)), **m)
            for i, (v, m) in enumerate(zip(values, extra, strict=True))]  # fmt: skip
    config = pipeline(field_type, transforms)
    schemas = {SCHEMA_ID: schema(field_type)}
    python = stage(tmp_path, config, TOPIC, schemas, msgs, native=False)
    native = stage(tmp_path, config, TOPIC, schemas, msgs, native=True)
    assert_same(python, native)
    names = [n for n in native.files if n.endswith(".avro") and "acme.events" in n]
    records: list[dict] = []
    types: dict[str, Any] = {}
    for name in sorted(names):
        reader = fastavro.reader(io.BytesIO(native.files[name]))
        types = {f["name"]: f["type"] for f in reader.writer_schema["fields"]}
        records += list(reader)
    return python, native, records, types


def _digest(value: Any) -> str:
    return hmac.digest(b"s3cret", str(value).encode(), "sha256").hex()


@needs_rewrites
def test_an_hmac_mask_of_a_nullable_long_digests_its_digits(tmp_path, monkeypatch):
    """fastavro hands the long as a Python int: ``str(value)`` is its digits, which the kernel
    digests from the field's encoding; a null stays null under ``["null", "string"]``."""
    monkeypatch.setenv(HMAC_ENV, "s3cret")
    values = [None, 0, -7, 2**63 - 1, -(2**63)]
    _, native, records, types = rewritten(
        tmp_path, ["null", "long"], values, [{"mask": "f", "key_env": HMAC_ENV}]
    )
    assert native.kernel_messages == len(values)
    assert types["f"] == ["null", "string"]
    assert [r["f"] for r in records] == [None, *(_digest(v) for v in values[1:])]


@needs_rewrites
def test_a_null_mask_keeps_a_declared_unions_layout(tmp_path):
    """``["long", "null"]`` stays as declared (null is branch 1) and a plain string becomes
    ``["null", "string"]``: the kernel writes each null under the derived layout."""
    transforms = [{"mask": "f", "method": "null"}, {"mask": "s", "method": "null"}]
    _, native, records, types = rewritten(tmp_path, ["long", "null"], [5, None], transforms)
    assert native.kernel_messages == 2
    assert (types["f"], types["s"]) == (["long", "null"], ["null", "string"])
    assert [(r["f"], r["s"]) for r in records] == [(None, None), (None, None)]


@needs_rewrites
def test_a_timestamp_millis_to_epoch_seconds_floors_negative_instants(tmp_path):
    """fastavro hands timestamp-millis as aware datetimes (``to_micros``: the number times
    1000); epoch seconds by floor division, so -1,500 ms is -2 s, as Python's ``//``."""
    millis = [-1_500, -1, 0, 1_999, -62_135_596_800_000, 253_402_300_799_999]
    field_type = {"type": "long", "logicalType": "timestamp-millis"}
    _, native, records, types = rewritten(
        tmp_path, field_type, millis, [{"timestamp": "f", "to": "epoch_s"}]
    )
    assert native.kernel_messages == len(millis)
    assert types["f"] == "long"
    assert [r["f"] for r in records] == [m // 1000 for m in millis]


@needs_rewrites
def test_a_header_add_takes_the_last_and_a_key_that_is_not_utf8_is_handed_back(tmp_path):
    """The last header of a name wins (Kafka's convention); a key that is not UTF-8 for a
    string field fails the step on the Python path (a dead letter), so the kernel hands that
    message back and both paths commit the same dead letter."""
    transforms = [{"add": "trace", "header": "trace-id"}, {"add": "k", "message": "key"},
                  {"add": "at_kafka", "message": "timestamp"}]  # fmt: skip
    messages = [
        {"key": b"a", "headers": [("trace-id", b"one"), ("other", b"x"), ("trace-id", b"two")]},
        {"key": b"\xff", "headers": [("trace-id", b"three")]},
        {"key": None, "headers": None, "timestamp": (0, 0)},
    ]
    python, native, records, types = rewritten(tmp_path, "long", [1, 2, 3], transforms, messages)
    assert python.result is not None and sum(python.result.dead_letters.values()) == 1
    assert native.kernel_messages == 2
    assert native.handbacks == {"part_uncertain": 1}
    assert types["trace"] == ["null", "string"] and types["k"] == ["null", "string"]
    assert [(r["f"], r["trace"], r["k"]) for r in records] == [(1, "two", "a"), (3, None, None)]
    assert records[1]["at_kafka"] is None  # no Kafka timestamp


@needs_rewrites
def test_a_boolean_cast_to_string_is_true_or_false(tmp_path):
    _, native, records, types = rewritten(
        tmp_path, ["null", "boolean"], [True, False, None], [{"cast": "f", "to": "string"}]
    )
    assert native.kernel_messages == 3
    assert types["f"] == ["null", "string"]
    assert [r["f"] for r in records] == ["true", "false", None]
