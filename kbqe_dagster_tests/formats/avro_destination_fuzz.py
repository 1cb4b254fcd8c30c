"""Seeded random scenarios of Confluent Avro topics with ``destinations``, for the kernel's
differential test (test_avro_destination_kernel.py).

Each scenario is the Avro transforms fuzz's (avro_transform_fuzz.py: the Avro kernel's random
schemas, routing and event-time rules, enrichment, bad frames, corrupted and respelled bodies,
random kernel-able transforms) with the topic's routing replaced by one to four destinations:
static tables or schema-name routing, each with, at random, its own kernel-able transforms
drawn over the record the topic's transforms leave, a projection (a random subset of that
record's fields in a random order, constants sometimes first), ``schema_names`` leaving
schemas out; and now and then what the kernel does not do for a schema (two schema-name
destinations into one table, a projection listing a constant first, transforms it refuses),
which keeps that schema on the Python path, still compared. (A ``when`` or field routing keeps
the whole topic there: test_avro_destination_kernel.py pins that.)
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import fastavro

from kbqe_dagster.core.errors import TransformSchemaError
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.record.routing import RoutingConfig, RoutingMode
from kbqe_dagster.core.transforms.compiler import compile_transforms, hmac_keys
from kbqe_dagster.core.transforms.destinations import DestinationConfig, project_schema
from kbqe_dagster.core.transforms.specs import AddField
from kbqe_dagster_tests.formats import avro_transform_fuzz
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV, draw_kernel_transforms
from kbqe_dagster_tests.staging import kernel_fuzz

TABLES = ["acme_sales.orders", "acme_sales.fills", "fuzz.a", "fuzz.b", "fuzz.c"]


def scenario(seed: int, messages: int) -> kernel_fuzz.Scenario:
    case = avro_transform_fuzz.scenario(seed, messages)
    schemas = [case.schemas[sid] for sid in sorted(case.schemas)]
    with_destinations(case, schemas, random.Random(seed * 7919 + 1))
    return case


def with_destinations(case: Any, schemas: list[dict], rng: random.Random) -> None:
    """Replace ``case``'s topic routing (its pipeline has one topic) with one to four random
    destinations over ``schemas`` (the first is what transforms are drawn over); the topic
    keeps its transforms with probability 0.6. Shared with json_destination_fuzz.py."""
    topic = case.pipeline.topics[0]
    first = schemas[0]
    top = topic.transforms if rng.random() < 0.6 else ()
    read = topic.event_time.fields
    try:
        base = compile_transforms(top, first, _keys(top)).output_schema
    except TransformSchemaError:
        base = first
    names = [record_full_name(s) for s in schemas]
    tables = rng.sample(TABLES, rng.randint(1, 4))
    destinations = []
    for table in tables:
        dataset, name = table.split(".")
        routing = RoutingConfig(RoutingMode.STATIC, dataset, name)
        if rng.random() < 0.12:  # two of them route into one table: Python's unroutable
            routing = RoutingConfig(RoutingMode.SCHEMA_NAME, dataset="fuzz")
        specs: tuple[Any, ...] = ()
        output = base
        if rng.random() < 0.6:
            # (The drawn constants are named added0, added1 like the topic's: renamed apart.)
            specs = tuple(
                replace(spec, add=f"{name}_{spec.add}") if isinstance(spec, AddField) else spec
                # (masks, timestamps, exact casts and parts of the message among them)
                for spec in draw_kernel_transforms(rng, base, read, to_digits=True, rewrites=True)
            )
            try:
                output = compile_transforms(specs, base, _keys(specs)).output_schema
            except TransformSchemaError:
                output = base
        fields = None
        all_names = [f["name"] for f in output["fields"]]
        if all_names and rng.random() < 0.6:
            # (Among them projections that leave out or move the field defining a named type
            # a kept field uses: the derived schema defines it where first used, avro_names.py.)
            fields = tuple(rng.sample(all_names, rng.randint(1, len(all_names))))
            assert _parses(project_schema(output, fields))
        schema_names = None
        if len(names) > 1 and rng.random() < 0.3:
            schema_names = tuple(rng.sample(names, rng.randint(1, len(names) - 1)))
        destinations.append(DestinationConfig(routing, fields, specs, schema_names))
    pipeline = case.pipeline
    topic = replace(topic, routing=destinations[0].routing, transforms=top,
                    destinations=tuple(destinations))  # fmt: skip
    statics = tuple(
        f"{d.routing.dataset}.{d.routing.table}"
        for d in destinations
        if d.routing.mode is RoutingMode.STATIC
    )
    allowed = replace(
        pipeline.allowed_destinations,
        patterns=tuple(dict.fromkeys(pipeline.allowed_destinations.patterns + statics)),
    )
    case.pipeline = replace(pipeline, topics=(topic,), allowed_destinations=allowed)


def _keys(specs: Any) -> dict[int, bytes]:
    """Some key for each hmac mask the transforms fuzz draws (only the derived schema is
    wanted here; the stage tasks read ``FUZZ_HMAC_ENV``, which the tests set)."""
    return hmac_keys(specs, {FUZZ_HMAC_ENV: "schema-only"}, "fuzz")


def _parses(schema: dict) -> bool:
    try:
        fastavro.parse_schema(schema, _write_hint=False)
    except Exception:  # noqa: BLE001 - fastavro raises several types
        return False
    return True
