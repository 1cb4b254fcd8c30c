"""The native kernel stages ``format: json`` values exactly as the Python path does: the same
files byte for byte, the same dead letters with the same reasons, the same counts and event
dates, on seeded random scenarios (formats/json_fuzz.py) and on the cases that decide it."""

from __future__ import annotations

import hmac
import io
import json

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.transforms.kernel_transforms import (
    KernelTransforms,
    cast_keeps_bytes,
    cast_rewrite,
    cast_to_digits,
    kernel_transforms,
)
from kbqe_dagster.core.transforms.specs import DropFields, RenameField
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV, scenario, with_kernel_transforms
from kbqe_dagster_tests.staging.hourly_fuzz import needs_hour_kernel, with_hour_tables
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, differential_fuzz, stage
from kbqe_dagster_tests.support.json_format import GOOD, SCHEMA, TOPIC, pipeline

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "add_json_schema"):
    pytest.skip(
        "the installed kernel predates format: json (make install)", allow_module_level=True
    )


def messages(values: list[bytes | None]) -> list[Msg]:
    return [Msg(TOPIC, 0, offset, value, b"k") for offset, value in enumerate(values)]


def json_stager(tmp_path, config):
    ctx = StageContext(KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"),
                       StagingLocation(str(tmp_path)), config, TOPIC, native_kernel=True)  # fmt: skip
    return stager_class(ctx)(ctx, OffsetRange(TOPIC, 0, 0, 10), tmp_path)


def both(tmp_path, config, msgs, batch_size=64):
    python = stage(tmp_path, config, TOPIC, {}, msgs, native=False)
    native = stage(tmp_path, config, TOPIC, {}, msgs, native=True, batch_size=batch_size)
    assert_same(python, native)
    return python, native


def test_good_json_values_are_staged_by_the_kernel_byte_for_byte(tmp_path):
    values = [json.dumps({**GOOD, "url": f"/p{i}", "at": 1_726_238_205_123 + i}).encode()
              for i in range(50)]  # fmt: skip
    python, native = both(tmp_path, pipeline(), messages(values))
    assert python.result.records == 50
    assert native.kernel_messages == 50
    assert native.handbacks == {}


def test_every_value_python_refuses_is_handed_back_and_dead_lettered_with_its_reason(tmp_path):
    bad = [b"{oops", b"[1]", b"\xef\xbb\xbf" + json.dumps(GOOD).encode(), None,
           json.dumps({**GOOD, "at": 1.0}).encode(), json.dumps({**GOOD, "at": 2**63}).encode(),
           json.dumps({**GOOD, "user": {"id": "7"}}).encode(), b'{"datasetName": NaN}',
           json.dumps({**GOOD, "url": None}).encode(), json.dumps({**GOOD, "-type": "x"}).encode()]  # fmt: skip
    good = json.dumps(GOOD).encode()
    python, native = both(tmp_path, pipeline(), messages([good, *bad, good]))
    # Python reads a UTF-8 BOM (utf-8-sig), and so does the kernel.
    assert sum(python.result.dead_letters.values()) == len(bad) - 1
    assert python.result.records == 3
    assert native.kernel_messages == 3
    assert sum(native.handbacks.values()) == len(bad) - 1


@pytest.mark.parametrize("spelling", [
    '{"datasetName":"web","tableName":"clicks","url":"\\/a\\u00e9\\ud83c\\udf89","at":1726238205123}',
    '{"url":"a","at":1726238205123,"tableName":"clicks","datasetName":"web","user":null,"x":[1,{}]}',
    '{"datasetName":"web","tableName":"clicks","url":"a","at":1,"at":1726238205123}',
    '{"datasetName":"web","tableName":"clicks","url":"a","at":-0,"user":{"id":-9223372036854775808}}',
    '{"datasetName":"web","tableName":"clicks","url":"\\ud800","at":1}',
    '{"datasetName":"web","tableName":"clicks","url":"\xed\xa0\x80","at":1}',
    ' \r\n{ "datasetName" : "web" , "tableName":"clicks","url":"","at":0 }\t',
])  # fmt: skip
def test_json_spellings_stage_natively_as_python_reads_them(tmp_path, spelling):
    value = spelling.encode("latin-1") if "\xed" in spelling else spelling.encode()
    python, native = both(tmp_path, pipeline(), messages([value] * 3))
    surrogate = "ud800" in spelling or "\xed" in spelling  # Python's; the kernel hands it back
    assert native.kernel_messages == (0 if surrogate else 3)
    assert python.result.records + sum(python.result.dead_letters.values()) == 3


@pytest.mark.parametrize(("spelling", "native"), [
    ("2024-09-13T23:30:00+0200", True), ("2024-09-13T23:30:00-0530", True),
    ("2024-09-13T23:30:00-05", True), ("2024-09-13T23:30:00,5-05:00", True),
    ("2024-09-13 23:30:00,123456789123+02:00", True), ("2024-09-13T00:00:00.Z", True),
    ("2024-09-13T23:59:59-00:00:01", True), ("2024-09-13T00:00:00+000001", True),
    ("2024-09-13x23:30+23:59", True), ("2024-09-13T23:30:00,5", True),
    ("2024-09-13T23:30:00.", False), ("2024-09-13T23:30:00+00:60", False),
    ("2024-09-13T23:30:00+02:00:00.5", False), ("2024-09-13T2330", False),
    ("2024-09-13T23:30:00+2400", False), ("2024-09-13T23:30:00+02:0", False),
])  # fmt: skip
@pytest.mark.parametrize("rule", ["local", "utc"])
def test_event_time_spellings_python_reads_are_dated_natively_as_python_does(
    tmp_path, spelling, native, rule
):
    """ISO spellings Python 3.11's ``fromisoformat`` reads — basic-format and hour offsets,
    offsets with seconds, ``,`` fractions of any length, an empty fraction before an offset,
    any separator — get the same event date natively under both date rules; what the kernel
    does not read (``+00:60`` is an hour to Python, a fraction of an offset's second) is
    handed back, and the Python path dates or dead-letters it."""
    config = pipeline(event_time={"fields": ["url"], "date_rule": rule})
    value = json.dumps({**GOOD, "url": spelling}).encode()
    python, native_run = both(tmp_path, config, messages([value] * 3))
    assert native_run.kernel_messages == (3 if native else 0)
    assert python.result.records + sum(python.result.dead_letters.values()) == 3


def test_a_date_field_given_a_string_is_python_verdict_and_a_bad_one_a_dead_letter(tmp_path):
    """fastavro parses a string given for an ``int``/``date`` field: a good one stages (on the
    Python path: the kernel hands strings for ints back), a bad one is a dead letter (it
    used to escape as a ValueError and fail the range)."""
    schema = {"type": "record", "name": "D", "fields": [
        {"name": "datasetName", "type": "string"}, {"name": "tableName", "type": "string"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}  # fmt: skip
    config = parse_pipeline_config({"version": 1, "allowed_destinations": ["web.*"], "topics": [
        {"name": TOPIC, "format": "json", "schema": schema, "event_time": {"fields": ["day"]}}]})  # fmt: skip
    values = [json.dumps({"datasetName": "web", "tableName": "clicks", "day": day}).encode()
              for day in [19979, "2024-09-13", "x", 19980]]  # fmt: skip
    python, native = both(tmp_path, config, messages(values))
    assert python.result.records == 3
    assert python.result.dead_letters == {"json_schema_mismatch": 1}
    assert native.kernel_messages == 2


def test_maps_and_defaults_are_encoded_as_python_keeps_them(tmp_path):
    """A duplicate map key keeps its first place and its last value (Python's dict); a missing
    field is written as its default; a map too big to search for duplicates goes back."""
    schema = {"type": "record", "name": "M", "fields": [
        {"name": "datasetName", "type": "string"}, {"name": "tableName", "type": "string"},
        {"name": "at", "type": "long"}, {"name": "tags", "type": {"type": "map", "values": "long"}},
        {"name": "level", "type": "string", "default": "info"},
        {"name": "score", "type": ["double", "null"], "default": 0.5}]}  # fmt: skip
    config = parse_pipeline_config({"version": 1, "allowed_destinations": ["web.*"], "topics": [
        {"name": TOPIC, "format": "json", "schema": schema, "event_time": {"fields": ["at"]}}]})  # fmt: skip
    head = '{"datasetName": "web", "tableName": "clicks", "at": 1726238205123'
    big = ", ".join(f'"k{i}": {i}' for i in range(300))
    values = [f'{head}, "tags": {{"a": 1, "b": 2, "a": 3}}}}'.encode(),
              f'{head}, "tags": {{}}, "level": "warn", "score": null}}'.encode(),
              f'{head}, "tags": {{{big}}}}}'.encode()]  # fmt: skip
    python, native = both(tmp_path, config, messages(values))
    assert python.result.records == 3
    assert native.kernel_messages == 2
    assert native.handbacks == {"json_uncertain": 1}
    staged = [r for name, data in native.files.items() if name.endswith(".avro")
              for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    assert list(staged[0]["tags"].items()) == [("a", 3), ("b", 2)]
    assert (staged[0]["level"], staged[0]["score"]) == ("info", 0.5)
    assert (staged[1]["level"], staged[1]["score"]) == ("warn", None)


def test_a_topic_with_transforms_that_change_values_stays_on_the_python_path(tmp_path):
    """Renames, drops, constants, masks, numeric timestamps and message parts are the
    kernel's (below); a value computed per message (an expression, a formatted time) is not."""
    config = pipeline(transforms=[{"compute": "n", "expression": "len(url)", "type": "long"}])
    python = stage(tmp_path, config, TOPIC, {}, messages([json.dumps(GOOD).encode()]), native=False)
    assert python.result.records == 1
    with pytest.raises(AssertionError, match="not available"):
        stage(tmp_path, config, TOPIC, {}, messages([json.dumps(GOOD).encode()]), native=True)


def test_json_differential_fuzz(tmp_path_factory, pytestconfig):
    """Seeded random scenarios, 400 messages each: identical commits on both paths, and the
    kernel stages (nearly) every record that stages."""
    tally = differential_fuzz("json", "fuzz.json", scenario, pytestconfig, tmp_path_factory)
    # The records it leaves to Python are spellings it does not read on purpose (UTF-16, lone
    # surrogates) and event times it is not sure of (as on the Avro path: zone ids): about 1 %
    # (formats/json_fuzz.py). Issue 26's target is 95 %.
    assert tally.share >= 0.95, f"the kernel staged {tally.share:.1%} of the records (< 95 %)"


@needs_hour_kernel
def test_json_differential_fuzz_with_hour_tables(tmp_path_factory, pytestconfig):
    """The same scenarios with some of their tables HOUR-partitioned (hourly_fuzz.py): the
    kernel writes those records' event hour column and counts their hours as Python does."""
    tally = differential_fuzz(
        "jsonhour", "fuzz.json", with_hour_tables(scenario), pytestconfig, tmp_path_factory
    )
    assert tally.share > 0.8, "the kernel staged too few records to prove anything"


def test_a_lone_surrogate_quoted_by_a_refusal_is_dead_lettered_not_a_failed_range(tmp_path):
    """A reason that quotes a lone surrogate (``"\\ud800"`` given for a ``long`` field) used to
    fail the dead letter's UTF-8 encoding, and with it the range on every retry; the dead
    letter now holds the escape (found by the JSON kernel's differential fuzz)."""
    bad = b'{"datasetName":"web","tableName":"clicks","url":"a","at":"\\ud800"}'
    good = json.dumps(GOOD).encode()
    python, native = both(tmp_path, pipeline(), messages([good, bad, good]))
    assert python.result.records == 2
    assert python.result.dead_letters == {"json_schema_mismatch": 1}
    assert native.kernel_messages == 2


UNIONS = {
    "type": "record",
    "name": "Mixed",
    "namespace": "shop",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "at", "type": "long"},
        {"name": "any", "type": ["null", "int", "long", "string", "boolean"]},
        {"name": "num", "type": ["null", "long", "float", "string", "double"]},
        {"name": "first", "type": ["float", "string"]},
        {"name": "nulls", "type": ["null", {"type": "null"}]},
        {"name": "opt", "type": ["string", "long", "null"], "default": "none"},
        {"name": "small", "type": "float"},
    ],
}


def test_unions_of_primitives_stage_natively_under_the_branch_fastavro_picks(tmp_path):
    """fastavro writes a union value under the first branch whose validator takes it (an
    int within 32 bits: ``int``; beyond: ``long``; a float: passing over ``float`` for a
    later ``double``); a missing field under its default's branch; a double beyond 32 bits
    as its C cast, an infinity. The kernel writes the same bytes."""
    head = {"datasetName": "web", "tableName": "clicks", "at": 1_726_238_205_123}
    rows = [
        {"any": None, "num": None, "first": 1.5, "nulls": None, "opt": "x", "small": 1e39},
        {"any": 7, "num": 7, "first": "s", "nulls": None, "small": -1e300},
        {"any": 2**40, "num": 2.5, "first": 3, "nulls": None, "opt": 5, "small": 3.4028235e38},
        {"any": "s", "num": "s", "first": -0.0, "opt": None, "small": 0.1},
        {"any": True, "num": -(2**63), "first": 2**62, "small": 7},
    ]
    values = [json.dumps({**head, **row}).encode() for row in rows]
    config = pipeline(schema=UNIONS, event_time={"fields": ["at"]})
    python, native = both(tmp_path, config, messages(values))
    assert python.result.records == len(rows)
    assert native.kernel_messages == len(rows)
    assert native.handbacks == {}
    staged = [r for name, data in sorted(python.files.items()) if name.endswith(".avro")
              for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    assert [r["any"] for r in staged] == [None, 7, 2**40, "s", True]
    assert staged[0]["small"] == float("inf") and staged[1]["small"] == float("-inf")


def test_a_union_value_no_branch_takes_is_handed_back_and_dead_lettered(tmp_path):
    """An object for a union of primitives (Python's mismatch), or an integer beyond 64 bits
    (which only a float branch takes, converted by Python, which stages it): handed back,
    with the rule that stopped the kernel."""
    head = {"datasetName": "web", "tableName": "clicks", "at": 1, "first": "s", "small": 0}
    good = json.dumps(head).encode()
    bad = [json.dumps({**head, "any": {"a": 1}}).encode(),
           json.dumps({**head, "num": 2**64}).encode()]  # fmt: skip
    config = pipeline(schema=UNIONS, event_time={"fields": ["at"]})
    python, native = both(tmp_path, config, messages([good, *bad, good]))
    assert python.result.dead_letters == {"json_schema_mismatch": 1}
    assert python.result.records == 3
    assert native.kernel_messages == 2
    assert native.handed_back_records == {"json_uncertain:union_branch": 1}


def test_nulls_of_a_nullable_bytes_or_fixed_field_stage_natively(tmp_path):
    """No JSON value is ``bytes`` to fastavro, but a null of ``["null", "bytes"]`` (or of a
    nullable ``fixed`` or decimal) is a null: the kernel writes it, and hands back the rest."""
    fixed = {"type": "fixed", "name": "Two", "size": 2}
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}
    schema = {**UNIONS, "fields": UNIONS["fields"][:3] + [
        {"name": "raw", "type": ["null", "bytes"]}, {"name": "two", "type": [fixed, "null"]},
        {"name": "price", "type": ["null", decimal]}]}  # fmt: skip
    head = {"datasetName": "web", "tableName": "clicks", "at": 1}
    values = [json.dumps({**head, "raw": None, "two": None}).encode(), json.dumps(head).encode(),
              json.dumps({**head, "raw": "AA=="}).encode()]  # fmt: skip
    config = pipeline(schema=schema, event_time={"fields": ["at"]})
    python, native = both(tmp_path, config, messages(values))
    assert python.result.records == 2
    assert python.result.dead_letters == {"json_schema_mismatch": 1}
    assert native.kernel_messages == 2


# --- rename and drop transforms on the kernel ----------------------------------------------
RENAMES = [{"rename": "url", "to": "path"}, {"rename": "user", "to": "visitor"}]
DROPS_BUILT = hasattr(kernel.StageKernel, "append_json_constants")
needs_drop_kernel = pytest.mark.skipif(
    not DROPS_BUILT,
    reason="the native stage kernel predates drop and add transforms (make install)",
)


def test_renamed_fields_are_staged_by_the_kernel_under_the_derived_schema(tmp_path):
    """A rename keeps the field's position and type: the record's bytes are the declared
    schema's, its file's schema and id the derived schema's (its columns renamed)."""
    values = [json.dumps({**GOOD, "url": f"/p{i}"}).encode() for i in range(20)]
    values += [json.dumps({**GOOD, "url": None}).encode()]  # a mismatch: dead-lettered
    python, native = both(tmp_path, pipeline(transforms=RENAMES), messages(values))
    assert python.result.records == 20 and python.result.dead_letters
    assert native.kernel_messages == 20 and native.handbacks == {"json_uncertain": 1}
    record = first_record(native)
    assert (record["path"], record["visitor"]) == ("/p0", {"id": 7})
    assert "url" not in record and "user" not in record


@needs_drop_kernel
def test_dropped_fields_are_checked_as_declared_then_left_out_by_the_kernel(tmp_path):
    """Python checks the value against the declared schema before its transforms: a dropped
    field that does not fit is still a dead letter; one that fits leaves no bytes."""
    drops = [{"drop": "user"}, {"rename": "url", "to": "path"}]
    values = [json.dumps({**GOOD, "url": f"/p{i}"}).encode() for i in range(20)]
    values += [json.dumps({**GOOD, "user": {"id": "seven"}}).encode()]  # a mismatch
    values += [json.dumps({k: v for k, v in GOOD.items() if k != "user"}).encode()]  # absent
    python, native = both(tmp_path, pipeline(transforms=drops), messages(values))
    assert python.result.records == 21 and python.result.dead_letters
    assert native.kernel_messages == 21 and native.handbacks == {"json_uncertain": 1}
    record = first_record(native)
    assert record["path"] == "/p0" and "user" not in record


@needs_drop_kernel
def test_added_constants_follow_the_record_as_fastavro_encodes_them(tmp_path):
    adds = [{"add": "source", "value": "web"}, {"add": "seen", "value": None, "type": "long?"},
            {"add": "at_ms", "value": 1_726_238_205_123, "type": "timestamp-millis"}]  # fmt: skip
    values = [json.dumps({**GOOD, "url": f"/p{i}"}).encode() for i in range(10)]
    python, native = both(tmp_path, pipeline(transforms=adds), messages(values))
    assert native.kernel_messages == 10 == python.result.records
    record = first_record(native)
    assert (record["source"], record["seen"], record["at_ms"].year) == ("web", None, 2024)


def first_record(staged):
    (name,) = [n for n in staged.files if n.startswith(f"{TOPIC}.0.web.clicks.")
               and n.endswith(".avro")]  # fmt: skip
    return next(fastavro.reader(io.BytesIO(staged.files[name])))


NEEDS_REWRITES = pytest.mark.skipif(
    not hasattr(kernel.StageKernel, "append_message_parts"),
    reason="the native stage kernel predates masks, timestamps and message parts",
)


@pytest.mark.parametrize(
    ("transforms", "native"),
    [
        (RENAMES, True),
        ([], True),
        ([{"rename": "url", "to": "path"}, {"drop": "user"}], True),
        # Event time reads the transformed record: the kernel reads the declared names.
        ([{"rename": "at", "to": "when"}], False),
        ([{"drop": "at"}], False),
        # A chain: the second renames (or drops) a renamed field.
        ([{"rename": "url", "to": "path"}, {"rename": "path", "to": "href"}], False),
        ([{"rename": "url", "to": "path"}, {"drop": "path"}], False),
        ([{"rename": "url", "to": "path"}, {"add": "source", "value": "web"}], True),
        # A part of the message, appended per message; a computed value is Python's.
        pytest.param([{"add": "source", "header": "trace"}], True, marks=NEEDS_REWRITES),
        pytest.param([{"add": "offset", "message": "offset"}], True, marks=NEEDS_REWRITES),
        ([{"add": "at2", "message": "timestamp"}, {"rename": "at2", "to": "at3"}], False),
        ([{"compute": "n", "expression": "len(url)", "type": "long"}], False),
        # An added field renamed or dropped: a chain.
        ([{"add": "source", "value": "web"}, {"drop": "source"}], False),
        # A cast to the field's own type changes no bytes; to another type it does.
        ([{"cast": "url", "to": "string"}], True),
        ([{"cast": "url", "to": "long"}], False),
        ([{"cast": "url", "to": "string"}, {"cast": "url", "to": "string"}], False),  # a chain
        ([{"cast": "url", "to": "boolean"}, {"rename": "url", "to": "path"}], False),
    ],
)
def test_which_transforms_the_kernel_stages(tmp_path, transforms, native):
    driver = NativeStaging.for_stager(json_stager(tmp_path, pipeline(transforms=transforms)))
    new = any("drop" in t or "value" in t or "cast" in t for t in transforms)
    # A kernel built before drops and constants leaves them on the Python path.
    assert (driver is not None) is (native and (DROPS_BUILT or not new))


def test_a_renamed_field_with_a_default_other_than_null_stays_on_the_python_path():
    """Absent, it is encoded with its default as declared but as null once renamed
    (``record.pop(old, None)``): the kernel, which encodes as declared, must not stage it. A
    null default encodes as null either way; a dropped field's default leaves no bytes."""
    schema = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "n", "type": "long", "default": 1}]}
    none = KernelTransforms()
    assert kernel_transforms([RenameField("url", "path")], schema, ["at"]) == none
    assert kernel_transforms([RenameField("user", "visitor")], schema, ["at"]) == none
    assert kernel_transforms([RenameField("n", "m")], schema, ["at"]) is None
    assert kernel_transforms([DropFields(("n",))], schema, ["at"]) == KernelTransforms(("n",))


CAST_SCHEMA = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "n", "type": "int"},
                                    {"name": "m", "type": ["null", "int"], "default": None}]}  # fmt: skip


@needs_drop_kernel
def test_casts_that_keep_the_bytes_are_staged_by_the_kernel(tmp_path):
    """An int cast to long is the same zig-zag varint, a cast to the field's own type the same
    value: the kernel encodes as declared, the files carry the derived (long) schema. The
    value is still checked as declared: 2^40 is no int."""
    casts = [
        {"cast": "n", "to": "long"},
        {"cast": "m", "to": "long"},
        {"cast": "url", "to": "string"},
    ]
    values = [json.dumps({**GOOD, "n": -i, "m": i or None}).encode() for i in range(10)]
    values += [json.dumps({**GOOD, "n": 2**40}).encode()]  # a mismatch: dead-lettered
    python, native = both(
        tmp_path, pipeline(schema=CAST_SCHEMA, transforms=casts), messages(values)
    )
    assert python.result.records == 10 and python.result.dead_letters
    assert native.kernel_messages == 10
    (name,) = [n for n in native.files if n.endswith(".avro") and "web.clicks" in n]
    types = {f["name"]: f["type"] for f in fastavro.reader(io.BytesIO(native.files[name])).writer_schema["fields"]}  # fmt: skip
    assert (types["n"], types["m"]) == ("long", ["null", "long"])


DIGITS_BUILT = hasattr(kernel.StageKernel, "cast_json_fields_to_digits")


@pytest.mark.skipif(not DIGITS_BUILT, reason="the kernel predates casts to strings (make install)")
def test_ints_and_longs_cast_to_strings_are_written_as_their_digits_by_the_kernel(tmp_path):
    """The cast step gives fastavro ``str(value)`` of the value checked as declared: the
    kernel writes the digits of the integer it encoded (``-0`` is ``"0"``, a null stays null)."""
    casts = [{"cast": "n", "to": "string"}, {"cast": "m", "to": "string"}]
    ints = [0, -1, 7, 2**31 - 1, -(2**31)]
    values = [json.dumps({**GOOD, "n": n, "m": n or None}).encode() for n in ints]
    values += [json.dumps({**GOOD, "n": 1}).replace('"n": 1', '"n": -0').encode()]
    values += [json.dumps({**GOOD, "n": 1.0}).encode()]  # a float is no int: dead-lettered
    python, native = both(
        tmp_path, pipeline(schema=CAST_SCHEMA, transforms=casts), messages(values)
    )
    assert python.result.records == 6 and python.result.dead_letters
    assert native.kernel_messages == 6
    (name,) = [n for n in native.files if n.endswith(".avro") and "web.clicks" in n]
    records = list(fastavro.reader(io.BytesIO(native.files[name])))
    assert [(r["n"], r["m"]) for r in records] == [
        ("0", None), ("-1", "-1"), ("7", "7"), ("2147483647", "2147483647"),
        ("-2147483648", "-2147483648"), ("0", None),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("declared", "to", "digits"),
    [
        ({"type": "int"}, "string", True),
        ({"type": "long"}, "string", True),
        ({"type": ["null", "long"], "default": None}, "string", True),
        ({"type": ["long", "null"]}, "string", False),  # another branch index once derived
        ({"type": "double"}, "string", False),  # repr of a float: not the JSON text
        ({"type": "boolean"}, "string", False),
        ({"type": "long", "default": 0}, "string", False),
        ({"type": "long"}, "double", False),
    ],
)
def test_which_casts_the_kernel_writes_as_digits(declared, to, digits):
    assert cast_to_digits({"name": "f", **declared}, to) is digits


@pytest.mark.parametrize(
    ("declared", "to", "same_bytes"),
    [
        ({"type": "int"}, "long", True),
        ({"type": ["null", "int"], "default": None}, "long", True),
        ({"type": "long"}, "long", True),
        ({"type": "string"}, "string", True),
        ({"type": "double"}, "double", True),
        ({"type": "boolean"}, "boolean", True),
        # The derived type is ["null", "long"]: the value is another union branch.
        ({"type": ["int", "null"]}, "long", False),
        # A float is written as 4 bytes, a double as 8; a number as a string is other bytes.
        ({"type": "float"}, "double", False),
        ({"type": "int"}, "string", False),
        ({"type": "long"}, "double", False),
        # Absent, it is its default as declared, but the cast step fails it.
        ({"type": "long", "default": 1}, "long", False),
    ],
)
def test_which_casts_keep_the_bytes(declared, to, same_bytes):
    assert cast_keeps_bytes({"name": "f", **declared}, to) is same_bytes


@needs_drop_kernel
def test_json_differential_fuzz_with_renames_drops_and_constants(tmp_path_factory, pytestconfig):
    """The JSON scenarios with rename, drop, cast and add-constant transforms
    (json_fuzz.with_kernel_transforms): identical commits on both paths, and the kernel stages
    the records of the transforms it takes."""
    tally = differential_fuzz(
        "jsonrename", "fuzz.json", with_kernel_transforms(scenario), pytestconfig, tmp_path_factory
    )
    assert tally.share > 0.5, "the kernel staged too few records to prove anything"


# --- mask and timestamp transforms on the kernel (rewrite.rs) -------------------------------
REWRITES_BUILT = hasattr(kernel.StageKernel, "rewrite_json_field")
needs_rewrite_kernel = pytest.mark.skipif(
    not REWRITES_BUILT, reason="the native stage kernel predates masks and timestamps"
)
HMAC_ENV = "KBQE_TEST_JSON_KERNEL_HMAC_KEY"
REWRITE_SCHEMA = {**SCHEMA, "fields": [
    *SCHEMA["fields"],
    {"name": "email", "type": "string"},
    {"name": "ni", "type": ["int", "null"]},  # derived ["null", "string"]: another branch
    {"name": "nl", "type": ["null", "long"], "default": None},
    {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "sec", "type": "long"},
    {"name": "note", "type": ["string", "null"], "default": "none"},
]}  # fmt: skip
REWRITE_GOOD = {**GOOD, "email": "a@b.c", "ni": 7, "nl": -3, "ms": 1_726_238_205_123,
                "us": 1_726_238_205_123_456, "sec": 1_726_238_205, "note": "x"}  # fmt: skip


def rewrite_records(tmp_path, transforms, values, kernel_messages):
    python, native = both(
        tmp_path, pipeline(schema=REWRITE_SCHEMA, transforms=transforms), messages(values)
    )
    assert native.kernel_messages == kernel_messages
    (name,) = [n for n in native.files if n.endswith(".avro") and "web.clicks" in n]
    reader = fastavro.reader(io.BytesIO(native.files[name]))
    types = {f["name"]: f["type"] for f in reader.writer_schema["fields"]}
    return python, list(reader), types


@needs_rewrite_kernel
def test_hmac_masks_are_written_by_the_kernel_as_python_digests_them(tmp_path, monkeypatch):
    """A string's UTF-8 bytes and an int's decimal digits (``str(value)``), keyed with the
    environment's key; a null stays null, and ``["int", "null"]`` becomes ``["null",
    "string"]``: the value moves from branch 0 to branch 1."""
    monkeypatch.setenv(HMAC_ENV, "s3cret")
    masks = [{"mask": f, "key_env": HMAC_ENV} for f in ("email", "ni", "nl")]
    values = [json.dumps({**REWRITE_GOOD, "email": e, "ni": n, "nl": n}).encode()
              for e, n in [("a@b.c", 7), ("Zürich 🎉", None), ("", -(2**31)), ("x", 0)]]  # fmt: skip
    _, records, types = rewrite_records(tmp_path, masks, values, 4)
    assert (types["ni"], types["nl"]) == (["null", "string"], ["null", "string"])
    digest = lambda v: hmac.digest(b"s3cret", str(v).encode(), "sha256").hex()  # noqa: E731
    assert [(r["email"], r["ni"]) for r in records] == [
        (digest("a@b.c"), digest(7)), (digest("Zürich 🎉"), None), (digest(""), digest(-(2**31))),
        (digest("x"), digest(0)),
    ]  # fmt: skip


@needs_rewrite_kernel
def test_null_masks_keep_a_declared_unions_layout_and_defaults_are_masked_too(tmp_path):
    """``_nullable`` keeps ``["string", "null"]`` as declared (null is branch 1) and makes a
    plain string ``["null", "string"]``; an absent field with a default is masked as well."""
    masks = [{"mask": "email", "method": "null"}, {"mask": "note", "method": "null"}]
    absent = {k: v for k, v in REWRITE_GOOD.items() if k != "note"}
    values = [json.dumps(REWRITE_GOOD).encode(), json.dumps(absent).encode()]
    _, records, types = rewrite_records(tmp_path, masks, values, 2)
    assert (types["email"], types["note"]) == (["null", "string"], ["string", "null"])
    assert [(r["email"], r["note"]) for r in records] == [(None, None), (None, None)]


@needs_rewrite_kernel
def test_timestamps_between_numbers_floor_as_python_does(tmp_path):
    """Epoch numbers by floor division (-1,500 ms is -2 s), timestamps through microseconds
    (a timestamp-micros written as millis is floored), a null stays null."""
    conversions = [{"timestamp": "ms", "to": "epoch_s"},
                   {"timestamp": "us", "to": "timestamp_millis"},
                   {"timestamp": "sec", "to": "timestamp_micros", "epoch_unit": "s"}]  # fmt: skip
    cases = [(-1_500, -1_501, -1), (1_999, None, 0), (0, 1, 253_402_300_799)]
    values = [json.dumps({**REWRITE_GOOD, "ms": a, "us": b, "sec": c}).encode()
              for a, b, c in cases]  # fmt: skip
    _, records, types = rewrite_records(tmp_path, conversions, values, 3)
    assert types["ms"] == "long"
    assert [r["ms"] for r in records] == [-2, 1, 0]
    assert [r["us"] and r["us"].timestamp() for r in records] == [-0.002, None, 0.0]


@needs_rewrite_kernel
def test_a_timestamp_out_of_range_is_handed_back_for_python_to_judge(tmp_path):
    """Past year 9999 ``from_micros`` raises: the kernel hands the message back and the Python
    path dead-letters it (``transform_failed``), as without the kernel."""
    conversions = [{"timestamp": "sec", "to": "timestamp_millis", "epoch_unit": "s"}]
    values = [json.dumps({**REWRITE_GOOD, "sec": s}).encode()
              for s in (0, 253_402_300_800, -62_135_596_801, 2**62)]  # fmt: skip
    python, native = both(
        tmp_path, pipeline(schema=REWRITE_SCHEMA, transforms=conversions), messages(values)
    )
    assert python.result.records == 1 and python.result.dead_letters == {"transform_failed": 3}
    assert native.kernel_messages == 1 and native.handbacks == {"json_uncertain": 3}


@pytest.mark.parametrize(
    ("transforms", "rewrites"),
    [
        ([{"mask": "email", "method": "null"}], 1),
        ([{"mask": "note", "method": "null"}], 1),
        ([{"mask": "email", "key_env": HMAC_ENV}], 1),
        ([{"mask": "ni", "key_env": HMAC_ENV}, {"rename": "ni", "to": "n2"}], 1),
        # Absent, it is its default as declared, but the step reads None.
        ([{"mask": "note", "key_env": HMAC_ENV}], None),
        # Event time reads the transformed field; a chain reads the first step's value.
        ([{"mask": "at", "method": "null"}], None),
        ([{"mask": "email", "method": "null"}, {"mask": "email", "method": "null"}], None),
        ([{"cast": "sec", "to": "string"}, {"timestamp": "sec", "to": "epoch_ms"}], None),
        # Dropped after a step that may fail: the step runs first.
        ([{"timestamp": "ms", "to": "epoch_s"}, {"drop": "ms"}], None),
        ([{"timestamp": "ms", "to": "epoch_us"}], 1),
        ([{"timestamp": "sec", "to": "epoch_ms", "epoch_unit": "s"}], 1),
        # Strings, zones and formats stay Python's.
        ([{"timestamp": "ms", "to": "string"}], None),
        ([{"timestamp": "email", "to": "epoch_s"}], None),
    ],
)
def test_which_masks_and_timestamps_the_kernel_rewrites(transforms, rewrites):
    from kbqe_dagster.core.transforms.compiler import hmac_keys

    specs = pipeline(schema=REWRITE_SCHEMA, transforms=transforms).topics[0].transforms
    keys = hmac_keys(specs, {HMAC_ENV: "s3cret-key"}, "topics[0].transforms")
    done = kernel_transforms(specs, REWRITE_SCHEMA, ["at"], keys)
    assert (None if done is None else len(done.rewrites)) == rewrites
    assert "s3cret-key" not in repr(done)  # the key is never printed


@needs_rewrite_kernel
def test_json_differential_fuzz_with_masks_and_timestamps(
    tmp_path_factory, pytestconfig, monkeypatch
):
    """The JSON scenarios with mask and timestamp transforms among the others
    (json_fuzz.with_kernel_transforms(rewrites=True)): identical commits on both paths."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "jsonmask", "fuzz.json", with_kernel_transforms(scenario, rewrites=True), pytestconfig,
        tmp_path_factory,
    )  # fmt: skip
    assert tally.share > 0.5, "the kernel staged too few records to prove anything"


@pytest.mark.skipif(
    not hasattr(kernel.StageKernel, "append_message_parts"),
    reason="the native stage kernel predates message parts",
)
def test_parts_of_the_message_are_appended_per_message_in_transform_order(tmp_path):
    """The offset, the Kafka timestamp (null when Kafka has none or past year 9999), the key as
    bytes and the last header of a name as text, among a constant, in transform order; a
    header that is not UTF-8 is handed back, and Python fails the step (a dead letter)."""
    adds = [{"add": "off", "message": "offset"}, {"add": "source", "value": "web"},
            {"add": "ts", "message": "timestamp"}, {"add": "k", "message": "key", "type": "bytes"},
            {"add": "trace", "header": "trace"}, {"add": "where", "message": "topic"}]  # fmt: skip
    value = json.dumps(GOOD).encode()
    cases = [
        (b"k1", [("trace", b"a"), ("trace", b"b")], (1, 1_726_238_205_123)),
        (None, [("trace", b"a"), ("trace", None)], (0, -1)),
        (b"\xff", None, (1, 253_402_300_800_000)),
        (b"k4", [("trace", b"\xff")], (1, 5)),  # not UTF-8: Python's transform_failed
    ]
    msgs = [Msg(TOPIC, 0, offset, value, key, headers, ts)
            for offset, (key, headers, ts) in enumerate(cases)]  # fmt: skip
    python, native = both(tmp_path, pipeline(transforms=adds), msgs)
    assert python.result.dead_letters == {"transform_failed": 1}
    assert native.kernel_messages == 3 and native.handbacks == {"part_uncertain": 1}
    (name,) = [n for n in native.files if n.endswith(".avro") and "web.clicks" in n]
    records = list(fastavro.reader(io.BytesIO(native.files[name])))
    assert [(r["off"], r["source"], r["ts"] and r["ts"].year, r["k"], r["trace"], r["where"])
            for r in records] == [
        (0, "web", 2024, b"k1", "b", TOPIC), (1, "web", None, None, None, TOPIC),
        (2, "web", None, b"\xff", None, TOPIC),
    ]  # fmt: skip


CASTS_SCHEMA = {**SCHEMA, "fields": [
    *SCHEMA["fields"], {"name": "b", "type": "boolean"}, {"name": "nb", "type": ["boolean", "null"]},
    {"name": "b2", "type": "boolean"}, {"name": "l", "type": "long"},
    {"name": "ln", "type": ["long", "null"]},
]}  # fmt: skip


@needs_rewrite_kernel
def test_casts_exact_from_the_encoded_value_are_rewritten_by_the_kernel(tmp_path):
    """A boolean to ``"true"``/``"false"`` and to 1.0; a long to a double (``float``: 2^53 + 1
    rounds to even, as Rust's ``as``); ``[long, null]`` to ``["null", "string"]`` (the value
    moves to branch 1): each as the cast step gives fastavro."""
    casts = [{"cast": "b", "to": "string"}, {"cast": "nb", "to": "long"},
             {"cast": "b2", "to": "double"}, {"cast": "l", "to": "double"},
             {"cast": "ln", "to": "string"}]  # fmt: skip
    rows = [(True, None, False, 2**53 + 1, -5), (False, True, True, -(2**63), None)]
    values = [json.dumps({**GOOD, "b": b, "nb": nb, "b2": b2, "l": n, "ln": ln}).encode()
              for b, nb, b2, n, ln in rows]  # fmt: skip
    python, native = both(
        tmp_path, pipeline(schema=CASTS_SCHEMA, transforms=casts), messages(values)
    )
    assert native.kernel_messages == 2 == python.result.records
    (name,) = [n for n in native.files if n.endswith(".avro") and "web.clicks" in n]
    records = list(fastavro.reader(io.BytesIO(native.files[name])))
    assert [(r["b"], r["nb"], r["b2"], r["l"], r["ln"]) for r in records] == [
        ("true", None, 0.0, float(2**53), "-5"), ("false", 1, 1.0, -(2.0**63), None),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("declared", "to", "rewritten"),
    [
        ({"type": "boolean"}, "string", True),
        ({"type": ["null", "boolean"], "default": None}, "long", True),
        ({"type": "int"}, "double", True),
        ({"type": ["long", "null"]}, "string", True),  # cast_to_digits keeps only [null, T]
        ({"type": "double"}, "string", False),  # repr of the value, which may be an int
        ({"type": "float"}, "long", False),  # the value was a double before its 4 bytes
        ({"type": "string"}, "long", False),  # text read by Python's rules
        ({"type": "boolean", "default": False}, "string", False),  # absent: the step fails
    ],
)
def test_which_casts_the_kernel_rewrites(declared, to, rewritten):
    assert (cast_rewrite({"name": "f", **declared}, to) is not None) is rewritten
