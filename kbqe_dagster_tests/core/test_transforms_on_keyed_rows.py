"""Transforms on keyed topics (core/transforms/keyed_rows.py): a key field takes only a
transform that keeps the key's identity, the key's columns follow its renames, and Debezium's
unavailable-value placeholder stays "unchanged" through the transforms."""

from __future__ import annotations

import hmac

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError, TransformFailedError
from kbqe_dagster.core.transforms.compiler import MessageMeta, compile_transforms
from kbqe_dagster.core.transforms.keyed_rows import key_columns, transform_row

PLACEHOLDER = "__debezium_unavailable_value"
META = MessageMeta("t", 0, 5)


def keyed_topic(transforms, keyed=None, source_format="debezium"):
    keyed = keyed if keyed is not None else {"key": ["id"]}
    if source_format == "avro":
        keyed = {"version": "v", **keyed}
    return {
        "name": "t",
        "format": source_format,
        "event_time": {"kafka_timestamp_fallback": True},
        "routing": {"mode": "static", "dataset": "inventory", "table": "customers"},
        "keyed": keyed,
        "transforms": transforms,
    }


def problems(transforms, keyed=None, source_format="debezium") -> str:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_config(
            {"version": 1, "topics": [keyed_topic(transforms, keyed, source_format)]}
        )
    return str(caught.value)


def parse(transforms, keyed=None, source_format="debezium"):
    return parse_pipeline_config(
        {"version": 1, "topics": [keyed_topic(transforms, keyed, source_format)]}
    ).topics[0]


@pytest.mark.parametrize("source_format", ["debezium", "avro"])
def test_drop_mask_rename_cast_timestamp_add_and_compute_are_allowed_on_keyed_topics(
    source_format,
) -> None:
    transforms = [
        {"drop": "notes"},
        {"mask": "email", "key_env": "MASK_KEY"},
        {"mask": "phone", "method": "null"},
        {"rename": "first_name", "to": "given_name"},
        {"cast": "score", "to": "double"},
        {"timestamp": "born", "epoch_unit": "ms", "to": "timestamp_millis"},
        {"add": "source", "value": "pg"},
        {"compute": "initial", "expression": "upper(given_name)", "type": "string"},
    ]
    assert len(parse(transforms, source_format=source_format).transforms) == len(transforms)


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        ({"drop": ["notes", "id"]}, "drop of key field 'id': a row without its key"),
        ({"mask": "id", "method": "null"}, "mask of key field 'id': method \"null\" makes"),
        ({"cast": "id", "to": "long"}, "cast of key field 'id': to long may make two keys one"),
        ({"cast": "id", "to": "double"}, "cast of key field 'id': to double"),
        ({"cast": "id", "to": "boolean"}, "cast of key field 'id': to boolean"),
        ({"timestamp": "id", "epoch_unit": "s", "to": "epoch_ms"}, "timestamp of key field 'id'"),
        ({"compute": "id", "expression": "id + 1", "type": "long"}, "compute of key field 'id'"),
        ({"function": "kbqe_dagster_tests.core.transform_functions:add_segment",
          "fields": {"segment": "string"}}, "function is not allowed on a keyed topic"),
    ],
)  # fmt: skip
def test_a_transform_that_loses_the_key_identity_is_refused_naming_it(transform, expected) -> None:
    text = problems([{"add": "x", "value": 1}, transform])
    assert f"topics[0].transforms[1]: {expected}" in text


def test_a_key_field_is_followed_through_its_renames() -> None:
    text = problems([{"rename": "id", "to": "customer_id"}, {"drop": "customer_id"}])
    assert "topics[0].transforms[1]: drop of key field 'customer_id'" in text
    # Renamed away, the old name is a new, non-key field: a constant may take it.
    topic = parse([{"rename": "id", "to": "customer_id"}, {"add": "id", "value": 1}])
    assert len(topic.transforms) == 2


def test_a_key_field_keeps_its_identity_through_hmac_rename_and_cast_to_string() -> None:
    transforms = parse(
        [
            {"rename": "id", "to": "customer_id"},
            {"cast": "customer_id", "to": "string"},
            {"mask": "tenant", "key_env": "MASK_KEY"},
        ],
        keyed={"key": ["id", "tenant"]},
    ).transforms
    assert key_columns(transforms, ("id", "tenant"), "w") == ("customer_id", "tenant")


def test_an_unknown_key_is_checked_when_the_merge_reads_it() -> None:
    """A Debezium topic without keyed.key: the Kafka key's fields come from the registry at
    the merge, which checks them the same way."""
    transforms = parse([{"mask": "id", "method": "null"}], keyed={}).transforms
    with pytest.raises(ValueError, match=r"topics\[t\].transforms\[0\]: mask of key field 'id'"):
        key_columns(transforms, ("id",), "topics[t].transforms")
    assert key_columns(transforms, ("customer_id",), "w") == ("customer_id",)


def test_hmac_keeps_a_key_identity_the_same_input_gives_the_same_digest() -> None:
    row = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]}
    [mask] = parse([{"mask": "id", "key_env": "MASK_KEY"}]).transforms
    compiled = compile_transforms([mask], row, {0: b"k"})
    digests = [compiled.apply({"id": value}, META)["id"] for value in (7, 8, 7)]
    assert digests[0] == digests[2] != digests[1]
    assert digests[0] == hmac.new(b"k", b"7", "sha256").hexdigest()


ROW = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "body", "type": ["null", "string"], "default": None},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "count", "type": ["null", "string"], "default": None},
    ],
}
UNCHANGED = {"id": 1, "body": PLACEHOLDER, "blob": PLACEHOLDER.encode(),
             "tags": [PLACEHOLDER], "count": "3"}  # fmt: skip


def run(transforms, record=UNCHANGED, placeholder=PLACEHOLDER):
    specs = parse(transforms).transforms
    compiled = compile_transforms(specs, ROW, dict.fromkeys(range(len(specs)), b"k"))
    return transform_row(compiled, specs, record, META, placeholder)


def test_an_unavailable_value_stays_unchanged_when_masked_renamed_or_cast_to_string() -> None:
    out = run(
        [
            {"mask": "body", "key_env": "MASK_KEY"},
            {"mask": "blob", "key_env": "MASK_KEY"},
            {"rename": "body", "to": "text"},
            {"cast": "text", "to": "string"},
            {"mask": "count", "key_env": "MASK_KEY"},
        ]
    )
    assert out["text"] == out["blob"] == PLACEHOLDER  # the MERGE keeps the latest real value
    assert out["count"] == hmac.new(b"k", b"3", "sha256").hexdigest()
    assert out["tags"] == [PLACEHOLDER]


def test_a_string_computed_from_an_unavailable_value_is_unavailable_too() -> None:
    out = run([{"compute": "shout", "expression": "upper(body)", "type": "string?"},
               {"compute": "n", "expression": "len(count)", "type": "long"}])  # fmt: skip
    assert out["shout"] == PLACEHOLDER and out["n"] == 1


@pytest.mark.parametrize(
    "transform",
    [
        {"cast": "body", "to": "long"},
        {"timestamp": "body", "to": "epoch_ms"},
        {"compute": "size", "expression": "len(tags)", "type": "long"},
    ],
)
def test_a_conversion_of_an_unavailable_value_fails_the_change_naming_the_field(transform) -> None:
    with pytest.raises(TransformFailedError, match="unavailable-value placeholder"):
        run([transform])


def test_without_a_placeholder_the_transforms_read_the_values_as_they_are() -> None:
    out = run([{"mask": "body", "key_env": "MASK_KEY"}], placeholder=None)
    assert out["body"] == hmac.new(b"k", PLACEHOLDER.encode(), "sha256").hexdigest()


TABLE_KEYED = {"key_from": "kafka_key", "key_format": "string", "key": ["customer_key"]}


def test_a_topic_keyed_by_its_kafka_key_takes_transforms_on_its_value() -> None:
    """keyed/table_stage.py applies them to the value in every changelog layout."""
    transforms = [
        {"drop": "notes"},
        {"mask": "email", "key_env": "MASK_KEY"},
        {"mask": "phone", "method": "null"},
        {"rename": "first_name", "to": "given_name"},
        {"cast": "score", "to": "double"},
        {"add": "source", "value": "crm"},
        {"compute": "initial", "expression": "upper(given_name)", "type": "string"},
    ]
    topic = parse(transforms, keyed=TABLE_KEYED, source_format="avro")
    assert len(topic.transforms) == len(transforms)


@pytest.mark.parametrize(
    "transform",
    [
        {"mask": "customer_key", "key_env": "MASK_KEY"},  # even one that keeps its identity
        {"rename": "customer_key", "to": "ck"},
        {"rename": "name", "to": "Customer_Key"},  # a value field made a key column
        {"drop": ["notes", "customer_key"]},
        {"compute": "customer_key", "expression": "'x'", "type": "string"},
        {"add": "customer_key", "value": "x"},
    ],
)
def test_a_topic_keyed_by_its_kafka_key_refuses_a_transform_of_a_key_column(transform) -> None:
    """Its key columns are the Kafka key's, which transforms do not change."""
    text = problems([transform], keyed=TABLE_KEYED, source_format="avro")
    assert "topics[0].transforms[0]: " in text and "of key column" in text
    assert "takes its key columns from the Kafka key" in text


def test_a_topic_keyed_by_its_kafka_key_refuses_a_function_transform() -> None:
    transform = {"function": "kbqe_dagster_tests.core.transform_functions:add_segment",
                 "fields": {"segment": "string?"}}  # fmt: skip
    text = problems([transform], keyed=TABLE_KEYED, source_format="avro")
    assert "topics[0].transforms[0]: function is not allowed on a keyed topic" in text


def test_a_row_transform_reads_only_the_fields_it_transforms_under_each_of_their_names() -> None:
    from kbqe_dagster.core.transforms.keyed_rows import read_fields

    specs = parse([
        {"rename": "email", "to": "mail"}, {"mask": "mail", "key_env": "K"},
        {"drop": "notes"}, {"add": "source", "value": "pg"},
        {"compute": "initial", "expression": "upper(first_name)", "type": "string"},
    ]).transforms  # fmt: skip
    assert read_fields(specs) == {"email", "mail", "initial", "upper", "first_name"}


def test_a_field_no_transform_reads_keeps_its_avro_form_so_any_valid_value_passes() -> None:
    """A date past year 9999 is a valid Avro int that Python's ``date`` cannot hold: decoded
    plain, it passes through a row transform as its bytes (as the native kernel copies it)."""
    import io

    import fastavro

    from kbqe_dagster.core.transforms.keyed_rows import plain_types

    date = {"type": "int", "logicalType": "date"}
    row = {"type": "record", "name": "R", "fields": [
        {"name": "born", "type": ["null", date]}, {"name": "seen", "type": date}]}  # fmt: skip
    plain = plain_types(row, {"seen"})
    assert plain["fields"][0]["type"] == ["null", {"type": "int"}]
    assert plain["fields"][1]["type"] == date  # read by a transform: its logical type stays
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(plain_types(row, set())),
                               {"born": 5_000_000, "seen": 0})  # fmt: skip
    body = out.getvalue()
    record = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(plain), None)
    assert record["born"] == 5_000_000
