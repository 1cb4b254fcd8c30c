"""``topics[].transforms`` in the pipeline file: read into specs, and every mistake reported at
its key path when the file is read, before anything is staged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import load_pipeline_config, parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.transforms.specs import (
    AddField,
    CastField,
    CastType,
    DropFields,
    MaskField,
    MaskMethod,
    MessageSource,
)

JSON_SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "url", "type": "string"},
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
    ],
}


def parse(transforms: Any, **topic: Any):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": "shop.orders",
                    "transforms": transforms,
                    "event_time": {"kafka_timestamp_fallback": True},
                    **topic,
                }
            ],
            "allowed_destinations": ["sales.*"],
        },
        source="t.yaml",
    )


def problems(transforms: Any, **topic: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(transforms, **topic)
    return str(caught.value)


def test_transforms_are_read_in_order_into_their_specs() -> None:
    [topic] = parse(
        [
            {"add": "kafka_key", "message": "key"},
            {"drop": ["a", "b"]},
            {"mask": "email", "method": None},
            {"cast": "amount", "to": "long"},
        ]
    ).topics
    assert topic.transforms == (
        AddField("kafka_key", message=MessageSource.KEY),
        DropFields(("a", "b")),
        MaskField("email", MaskMethod.NULL),
        CastField("amount", CastType.LONG),
    )
    assert parse(None).topics[0].transforms == ()


@pytest.mark.parametrize(
    ("transforms", "topic", "expected"),
    [
        ({"drop": "x"}, {}, "topics[0].transforms: expected a list of transforms, got a mapping"),
        (
            [{"to": "x"}],
            {},
            "topics[0].transforms[0]: expected a mapping with one of add, "
            "rename, drop, mask, cast, timestamp, compute, function; got a mapping",
        ),
        (
            [{"rename": "a", "drop": "b"}],
            {},
            "topics[0].transforms[0]: expected a mapping with "
            "one of add, rename, drop, mask, cast, timestamp, compute, function; got several: "
            "rename, drop",
        ),
        ([{"rename": "a"}], {}, "topics[0].transforms[0].to: required"),
        (
            [{"rename": "a", "too": "b"}],
            {},
            "topics[0].transforms[0].too: unknown key; did you mean 'to'?",
        ),
        (
            [{"drop": ["a", "b.c"]}],
            {},
            "topics[0].transforms[0].drop[1]: 'b.c' is not an Avro field name",
        ),
        (
            [{"cast": "a", "to": "int128"}],
            {},
            "topics[0].transforms[0].to: expected one of "
            "string, long, double, boolean, got 'int128'",
        ),
        ([{"mask": "a"}], {}, "topics[0].transforms[0]: hmac_sha256 needs key_env"),
        (
            [{"mask": "a", "method": None, "key_env": "K"}],
            {},
            'topics[0].transforms[0]: key_env is not used with method "null"',
        ),
        (
            [{"timestamp": "a", "to": "string", "zone": "Mars/Base"}],
            {},
            "topics[0].transforms[0]: zone 'Mars/Base' is not an IANA time zone",
        ),
        (
            [{"timestamp": "a", "to": "epoch_ms", "format": "%Y"}],
            {},
            "topics[0].transforms[0]: format is only for to: string",
        ),
        (
            [{"compute": "a", "expression": "b +", "type": "long"}],
            {},
            "topics[0].transforms[0].expression: not a valid expression",
        ),
        (
            [{"compute": "a", "expression": "b", "type": "decimal"}],
            {},
            "topics[0].transforms[0].type: unknown type 'decimal'",
        ),
        (
            [{"add": "a", "value": None}],
            {},
            "topics[0].transforms[0]: needs value, header or message (a null value needs type)",
        ),
        (
            [{"add": "a", "value": 1, "header": "h"}],
            {},
            "topics[0].transforms[0]: give one of value, header, message; got value, header",
        ),
        (
            [{"add": "a", "message": "offset", "type": "string"}],
            {},
            "topics[0].transforms[0]: type is fixed for message: offset",
        ),
        (
            [{"function": "no_such_module_xyz:f"}],
            {},
            "topics[0].transforms[0].function: "
            "transform function 'no_such_module_xyz:f' cannot be imported",
        ),
        (
            [
                {
                    "function": "kbqe_dagster_tests.core.transform_functions:explode",
                    "fields": {"x": "uuid"},
                }
            ],
            {},
            "topics[0].transforms[0].fields.x: unknown type 'uuid'",
        ),
        (
            [{"add": "x", "value": 1}, {"drop": "datasetName"}],
            {},
            "topics[0].transforms[1]: drop removes field 'datasetName', which routing reads "
            "(datasetName)",
        ),
        (
            [{"rename": "tableName", "to": "table"}],
            {},
            "topics[0].transforms[0]: rename removes field 'tableName', which routing reads",
        ),
        (
            [{"add": "x", "value": 1}, {"drop": "id"}],
            {
                "routing": {"mode": "static", "dataset": "sales", "table": "t"},
                "keyed": {"key": ["id"], "version": "v"},
            },
            "topics[0].transforms[1]: drop of key field 'id'",
        ),
        (
            [{"add": "x", "value": 1}, {"cast": "nope", "to": "long"}],
            {"format": "json", "schema": JSON_SCHEMA},
            "topics[0].transforms[1]: cast field 'nope': is not in the record schema at this point "
            "(record schema Click)",
        ),
    ],
)
def test_mistakes_are_config_errors_at_their_key_paths(transforms, topic, expected) -> None:
    assert expected in problems(transforms, **topic)


def test_dropping_a_routing_field_after_renaming_another_onto_it_is_fine() -> None:
    [topic] = parse([{"drop": "tableName"}, {"rename": "kind", "to": "tableName"}]).topics
    assert len(topic.transforms) == 2


def test_the_transforms_example_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "transforms.yaml"
    [topic] = load_pipeline_config(example).topics
    assert [type(t).__name__ for t in topic.transforms][:3] == [
        "AddField",
        "ComputeField",
        "CastField",
    ]
    assert len(topic.transforms) == 11
