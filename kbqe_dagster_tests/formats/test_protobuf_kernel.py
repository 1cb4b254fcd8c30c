"""The native kernel stages ``format: protobuf`` values exactly as the Python path does: the
same files byte for byte, the same dead letters with the same reasons, the same counts and
event dates, on seeded random scenarios written at the wire level (formats/protobuf_fuzz.py)
and on the cases that decide it."""

from __future__ import annotations

import hmac
import io

import fastavro
import pytest
from google.protobuf import descriptor_pool

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.formats.protobuf_program import KernelProgramRefused, kernel_program
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.formats import protobuf_stage
from kbqe_dagster.formats.protobuf_kernel import ProtobufKernelStaging
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV
from kbqe_dagster_tests.formats.protobuf_fuzz import proto_text, scenario, with_kernel_transforms
from kbqe_dagster_tests.staging.hourly_fuzz import needs_hour_kernel, with_hour_tables
from kbqe_dagster_tests.staging.kernel_equality import (
    Msg,
    Staged,
    assert_same,
    differential_fuzz,
    stage,
)
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
from kbqe_dagster_tests.support.protobuf_format import (
    IDS,
    ORDER_V2,
    REFUND,
    TOPIC,
    fake_registry,
    framed,
    order,
    pipeline,
)

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "add_protobuf_schema"):
    pytest.skip(
        "the installed kernel predates format: protobuf (make install)", allow_module_level=True
    )


FUZZ_TOPIC = "fuzz.protobuf"
FUZZ_TEXT = proto_text("string", "int64")  # formats/protobuf_fuzz.py's Event, every field kind
HEAD = b"\x0a\x03web\x12\x06clicks\x1a\x142024-09-13T14:36:45Z"  # routing and event time


def fuzz_registry() -> FakeSchemaRegistry:
    return FakeSchemaRegistry({40: RegisteredSchema(40, "PROTOBUF", FUZZ_TEXT)})


def fuzz_pipeline():
    return parse_pipeline_config({"version": 1, "allowed_destinations": ["web.*"], "topics": [
        {"name": FUZZ_TOPIC, "format": "protobuf", "event_time": {"fields": ["eventTime"]}}]})  # fmt: skip


def event(body: bytes) -> bytes:
    """An ``Event`` of schema id 40, indexes ``[0]``."""
    return encode_frame(40, b"\x00" + body)


def messages(values: list[bytes | None], topic: str = TOPIC) -> list[Msg]:
    return [Msg(topic, 0, offset, value, b"k") for offset, value in enumerate(values)]


def both(tmp_path, config, msgs, registry=None, topic=TOPIC, batch_size=64):
    python = stage(tmp_path, config, topic, {}, msgs, native=False,
                   lookup=registry or fake_registry())  # fmt: skip
    native = stage(tmp_path, config, topic, {}, msgs, native=True, batch_size=batch_size,
                   lookup=registry or fake_registry())  # fmt: skip
    assert_same(python, native)
    return python, native


def avro_records(staged: Staged) -> list[dict]:
    return [r for name, data in sorted(staged.files.items()) if name.endswith(".avro")
            for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip


def test_the_protobuf_stager_drives_the_kernel_unless_it_reshapes_records(tmp_path):
    """Reshapes it does not do (a computed field, say; renames, drops, casts, constants,
    masks, numeric timestamps and parts of the message it does: below)."""
    assert protobuf_stage.ProtobufRangeStager.native_driver is ProtobufKernelStaging
    values = [framed("v1", order(i=i)) for i in range(3)]
    reshaped = pipeline(transforms=[{"compute": "n", "expression": "1", "type": "long"}])
    python = stage(tmp_path, reshaped, TOPIC, {}, messages(values), native=False,
                   lookup=fake_registry())  # fmt: skip
    assert python.result.records == 3
    with pytest.raises(AssertionError, match="not available"):
        stage(tmp_path, reshaped, TOPIC, {}, messages(values), native=True, lookup=fake_registry())


needs_transform_kernel = pytest.mark.skipif(
    not hasattr(kernel.StageKernel, "add_transformed_protobuf_schema"),
    reason="the installed kernel predates protobuf transforms (make install)",
)
KERNEL_TRANSFORMS = [{"rename": "id", "to": "order_id"}, {"drop": "lines"},
                     {"add": "source", "value": "web"}]  # fmt: skip


@needs_transform_kernel
def test_renames_drops_and_constants_are_staged_by_the_kernel_byte_for_byte(tmp_path):
    """Python converts the whole message, then transforms it: the kernel decodes and checks
    as without transforms, cuts the dropped field and appends the constant."""
    values = [framed("v1", order(i=i)) for i in range(20)]
    values += [framed("v1", order(i=99))[:-3]]  # truncated inside the dropped lines
    python, native = both(tmp_path, pipeline(transforms=KERNEL_TRANSFORMS), messages(values))
    assert python.result.records == 20
    assert native.kernel_messages == 20
    (record, *_) = [r for r in avro_records(python) if "source" in r]  # not the dead letter
    assert "lines" not in record and "id" not in record
    assert (record["order_id"], record["source"]) == (0, "web")
    assert sum(python.result.dead_letters.values()) == 1  # the truncated one: Python's verdict


NEEDS_REWRITES = pytest.mark.skipif(
    not hasattr(kernel.StageKernel, "append_message_parts"),
    reason="the native stage kernel predates masks, timestamps and message parts",
)


@needs_transform_kernel
@pytest.mark.parametrize(
    ("transforms", "native"),
    [
        (KERNEL_TRANSFORMS, True),
        ([{"drop": "total"}, {"add": "n", "value": 3, "type": "int"}], True),
        # A cast that changes no bytes (to the field's own type); to a string the kernel
        # rewrites the digits; to a boolean (0 and 1 only) it does not.
        ([{"cast": "id", "to": "long"}, {"drop": "lines"}], True),
        pytest.param(
            [{"cast": "id", "to": "string"}, {"drop": "lines"}], True, marks=NEEDS_REWRITES
        ),
        ([{"cast": "id", "to": "boolean"}, {"drop": "lines"}], False),
        # A chain, or a computed value: Python's.
        ([{"rename": "id", "to": "n"}, {"drop": "n"}], False),
        ([{"compute": "n", "expression": "1", "type": "long"}], False),
        # A mask, a numeric timestamp and parts of the message: the kernel's.
        pytest.param(
            [{"mask": "id", "method": "null"}, {"add": "trace", "header": "trace"}],
            True,
            marks=NEEDS_REWRITES,
        ),
        pytest.param(
            [{"add": "at", "message": "timestamp"}, {"add": "o", "message": "offset"}],
            True,
            marks=NEEDS_REWRITES,
        ),
    ],
)
def test_which_transforms_the_kernel_stages(tmp_path, transforms, native):
    values = [framed("v1", order(i=i)) for i in range(5)]
    config = pipeline(transforms=transforms)
    python = stage(tmp_path, config, TOPIC, {}, messages(values), native=False,
                   lookup=fake_registry())  # fmt: skip
    try:
        staged = stage(tmp_path, config, TOPIC, {}, messages(values), native=True,
                       lookup=fake_registry())  # fmt: skip
    except AssertionError as error:  # no driver for the topic at all
        assert not native and "not available" in str(error)
        return
    assert_same(python, staged)
    assert staged.kernel_messages == (5 if native else 0)


def test_good_messages_are_staged_by_the_kernel_byte_for_byte(tmp_path):
    values = [framed("v1", order(i=i)) for i in range(40)]
    values += [
        framed("v2", order(ORDER_V2, i, coupon="XMAS" if i % 2 else None)) for i in range(10)
    ]
    values += [
        encode_frame(IDS["v1"], b"\x02\x00" + order(i=3).SerializeToString())
    ]  # explicit [0]
    python, native = both(tmp_path, pipeline(), messages(values))
    assert python.result.records == len(values)
    assert native.kernel_messages == len(values)
    assert native.handbacks == {}


def test_another_message_type_stages_natively_under_its_declared_file_schema_id(tmp_path):
    refund = REFUND(order_id=5)
    refund.placed_at.seconds = 1_726_238_205
    values = [framed("v1", order()), framed("v1", refund, (1,)), framed("v1", refund, (1,))]
    config = pipeline(routing={"mode": "schema_name", "dataset": "shop"})
    python, native = both(tmp_path, config, messages(values))
    assert python.result.records == 3
    assert native.kernel_messages == 3


def test_every_message_python_refuses_is_handed_back_with_its_reason(tmp_path):
    good = framed("v1", order())
    body = order().SerializeToString()
    bad = [None, b"", encode_frame(IDS["v1"], b"\x03" + body),  # a negative index count
           encode_frame(IDS["v1"], b"\x02\x0a" + body),  # index 5: no such message
           encode_frame(IDS["v1"], b"\x00" + body[:-3]),  # truncated
           encode_frame(IDS["recursive"], b"\x00"), encode_frame(IDS["avro"], b"\x00"),
           encode_frame(999, b"\x00" + body), encode_frame(IDS["v1"], b"\x00" + body + b"\x1a")]  # fmt: skip
    python, native = both(tmp_path, pipeline(), messages([good, *bad, good]))
    assert python.result.records == 2
    assert sum(python.result.dead_letters.values()) == len(bad)
    assert native.kernel_messages == 2


def test_maps_are_staged_sorted_by_key_on_both_paths(tmp_path):
    """upb iterates a map in its hash order, seeded per process: the mapping sorts the entries
    by key so a range staged twice, or by the kernel, gives the same bytes; the last entry of a
    key wins, as upb keeps it; an entry without a value has the value's default."""
    entries = [b"\x0a\x01b\x12\x01x", b"\x0a\x01a\x12\x01y", b"\x0a\x01b\x12\x01z",
               b"\x0a\x02\xc3\xa9", b"\x0a\x01A"]  # fmt: skip
    attrs = b"".join(b"\xca\x01" + bytes([len(e)]) + e for e in entries)  # field 25
    python, native = both(tmp_path, fuzz_pipeline(), messages([event(HEAD + attrs)] * 2, FUZZ_TOPIC),
                          fuzz_registry(), FUZZ_TOPIC)  # fmt: skip
    assert native.kernel_messages == 2
    staged = avro_records(python)[0]["attrs"]
    assert list(staged.items()) == [("A", ""), ("a", "y"), ("b", "z"), ("é", "")]


def test_a_oneof_keeps_the_member_set_last(tmp_path):
    text, number = b"\xf2\x01\x02hi", b"\xf8\x01\x07"  # text = 30, number = 31
    values = [event(HEAD + text + number), event(HEAD + number + text)]
    python, native = both(tmp_path, fuzz_pipeline(), messages(values, FUZZ_TOPIC), fuzz_registry(),
                          FUZZ_TOPIC)  # fmt: skip
    assert native.kernel_messages == 2
    first, second = avro_records(python)
    assert (first["text"], first["number"]) == (None, 7)
    assert (second["text"], second["number"]) == ("hi", None)


@pytest.mark.parametrize("field, wire", [
    ("uint64 above 2^63-1", b"\x40\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),
    ("unknown enum number", b"\x98\x01\x07"),
    ("NaN double", b"\x81\x01" + b"\x00\x00\x00\x00\x00\x00\xf8\x7f"),
    ("string not UTF-8", b"\xf2\x01\x01\xff"),
    ("Timestamp past 9999", b"\xba\x02\x06\x08\x80\xa0\xce\x9d\x9b\x07"),
    ("a message given twice", b"\x22\x02\x12\x00\x22\x02\x12\x00"),
    ("a group", b"\x0b\x0c"),
    ("a cleared oneof member not UTF-8", b"\xf2\x01\x01\xff\xf8\x01\x07"),
    ("a padded length", b"\x92\x01\x81\x00x"),
])  # fmt: skip
def test_what_the_kernel_is_not_certain_of_is_the_python_paths_verdict(tmp_path, field, wire):
    values = [event(HEAD), event(HEAD + wire), event(HEAD)]
    python, native = both(tmp_path, fuzz_pipeline(), messages(values, FUZZ_TOPIC), fuzz_registry(),
                          FUZZ_TOPIC)  # fmt: skip
    assert native.kernel_messages == 2, field
    assert native.handbacks == {"protobuf_uncertain": 1}, field


@pytest.mark.parametrize("field, wire", [
    ("int32 past 32 bits: the low 32", b"\x28\x80\x80\x80\x80\x20"),
    ("uint32 past 32 bits", b"\x38\xff\xff\xff\xff\x7f"),
    ("bool of 2: true", b"\x88\x01\x02"),
    ("a varint's bits past 64, dropped", b"\x30\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f"),
    ("a known field of another wire type: unknown", b"\x2d\x01\x00\x00\x00"),
    ("a map entry with an unknown field: not in the map", b"\xca\x01\x05\x0a\x01a\x18\x01"),
])  # fmt: skip
def test_what_upb_reads_leniently_the_kernel_reads_the_same(tmp_path, field, wire):
    """upb's own rules (``_upb_Decoder_Munge``, unknown fields), reproduced: staged natively,
    the same bytes as the Python path."""
    values = [event(HEAD), event(HEAD + wire), event(HEAD)]
    python, native = both(tmp_path, fuzz_pipeline(), messages(values, FUZZ_TOPIC), fuzz_registry(),
                          FUZZ_TOPIC)  # fmt: skip
    assert python.result.records == 3, field
    assert native.kernel_messages == 3, field


def test_a_program_is_refused_for_what_the_kernel_does_not_decode():
    proto2 = 'syntax = "proto2"; message R { required int64 id = 1; }'
    root = compile_files({ROOT_FILE: proto2})
    pool = descriptor_pool.DescriptorPool()
    for proto in root.file:
        pool.Add(proto)
    with pytest.raises(KernelProgramRefused, match="required"):
        kernel_program(pool.FindMessageTypeByName("R"))


def test_protobuf_differential_fuzz(tmp_path_factory, pytestconfig):
    """Seeded random scenarios, 400 messages each: identical commits on both paths, and the
    kernel stages (nearly) every record that stages."""
    tally = differential_fuzz(
        "protobuf",
        "fuzz.protobuf",
        scenario,
        pytestconfig,
        tmp_path_factory,
        lookup_of=lambda case: case.registry,
    )
    assert tally.share > 0.8, "the kernel staged too few records to prove anything"
    if tally.plain_records >= 1000:
        assert tally.plain_share >= 0.95, "the kernel hands back producers' ordinary messages"


@needs_hour_kernel
def test_protobuf_differential_fuzz_with_hour_tables(tmp_path_factory, pytestconfig):
    """The same scenarios with some of their tables HOUR-partitioned (hourly_fuzz.py)."""
    tally = differential_fuzz(
        "protobufhour",
        "fuzz.protobuf",
        with_hour_tables(scenario),
        pytestconfig,
        tmp_path_factory,
        lookup_of=lambda case: case.registry,
    )
    assert tally.share > 0.8, "the kernel staged too few records to prove anything"


@needs_transform_kernel
def test_protobuf_differential_fuzz_with_renames_drops_and_constants(
    tmp_path_factory, pytestconfig
):
    """The Protobuf scenarios with rename, drop and add-constant transforms
    (protobuf_fuzz.with_kernel_transforms): identical commits on both paths, and the kernel
    stages the records of the transforms it takes."""
    tally = differential_fuzz(
        "protobuftransform",
        "fuzz.protobuf",
        with_kernel_transforms(scenario),
        pytestconfig,
        tmp_path_factory,
        lookup_of=lambda case: case.registry,
    )
    assert tally.share > 0.5, "the kernel staged too few records to prove anything"


@pytest.mark.skipif(
    not hasattr(kernel.StageKernel, "add_rewritten_protobuf_schema"),
    reason="the native stage kernel predates masks and timestamps",
)
def test_protobuf_differential_fuzz_with_masks_and_timestamps(
    tmp_path_factory, pytestconfig, monkeypatch
):
    """The scenarios with mask (null and hmac) and numeric timestamp transforms among the
    others (with_kernel_transforms(rewrites=True)): identical commits on both paths."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "protobufmask",
        "fuzz.protobuf",
        with_kernel_transforms(scenario, rewrites=True),
        pytestconfig,
        tmp_path_factory,
        lookup_of=lambda case: case.registry,
    )
    assert tally.share > 0.5, "the kernel staged too few records to prove anything"


@pytest.mark.skipif(
    not hasattr(kernel.StageKernel, "add_rewritten_protobuf_schema"),
    reason="the native stage kernel predates masks and timestamps",
)
def test_hmac_masks_and_message_parts_are_staged_by_the_kernel_byte_for_byte(tmp_path, monkeypatch):
    """An int64 masked with HMAC-SHA256 of its digits (the minimum's too) next to a dropped
    field, and the offset and key appended: the Protobuf decoder writes each field as
    declared, then rewrites it at its mark."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "pb-key")
    transforms = [{"mask": "id", "key_env": FUZZ_HMAC_ENV}, {"drop": "lines"},
                  {"add": "o", "message": "offset"}, {"add": "k", "message": "key", "type": "bytes"}]  # fmt: skip
    minimum = order(i=3)
    minimum.id = -(2**63)
    values = [framed("v1", order(i=0)), framed("v1", order(i=7)), framed("v1", minimum)]
    python, native = both(tmp_path, pipeline(transforms=transforms), messages(values))
    assert native.kernel_messages == 3 == python.result.records
    digest = lambda v: hmac.digest(b"pb-key", str(v).encode(), "sha256").hex()  # noqa: E731
    assert [(r["id"], r["o"]) for r in avro_records(native)] == [
        (digest(0), 0), (digest(7), 1), (digest(-(2**63)), 2),
    ]  # fmt: skip
