"""A stage worker asks the registry once per schema per process, not once per range: what a
registry id (or subject version) means never changes, so what was found is shared by every
``SchemaLookup`` of the same registry; what was not found is remembered for one lookup only."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kbqe_dagster.resources import schema_registry
from kbqe_dagster.resources.schema_registry import RegistrySettings, SchemaLookup, SchemaReference

SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


class FakeClient:
    """confluent-kafka's client at the HTTP boundary: counts what it is built for and asked."""

    built: list[dict] = []

    def __init__(self, config: dict) -> None:
        FakeClient.built.append(config)
        self.registered = {7: SCHEMA}
        self.asked: list[int] = []

    def get_schema(self, schema_id: int):
        self.asked.append(schema_id)
        if schema_id not in self.registered:
            raise SchemaRegistryError(404, 40403, "Schema not found")
        return SimpleNamespace(
            schema_type="AVRO", schema_str=json.dumps(self.registered[schema_id]), references=[]
        )

    def get_version(self, subject: str, version: int):
        self.asked.append((subject, version))
        return SimpleNamespace(schema_id=9, schema=self.get_schema(7))


@pytest.fixture(autouse=True)
def fake_registry(monkeypatch):
    FakeClient.built = []
    monkeypatch.setattr(schema_registry, "SchemaRegistryClient", FakeClient)
    monkeypatch.setattr(schema_registry, "_CACHES", {})


def the_client(lookup: SchemaLookup) -> FakeClient:
    return lookup._client


def test_a_schema_found_by_one_range_is_not_asked_for_by_the_next():
    settings = RegistrySettings("http://registry:8081")
    first, second = SchemaLookup(settings), SchemaLookup(settings)
    assert first.get(7).schema == SCHEMA
    assert second.get(7).schema == SCHEMA
    assert the_client(second).asked == [7]
    assert len(FakeClient.built) == 1  # one client per registry and process


def test_no_client_is_built_until_a_schema_is_asked_for():
    SchemaLookup(RegistrySettings("http://registry:8081"))
    assert FakeClient.built == []


def test_a_missing_id_is_asked_again_by_the_next_range():
    """It may have been registered since: only found schemas are shared."""
    settings = RegistrySettings("http://registry:8081")
    first = SchemaLookup(settings)
    assert first.get(8) is None and first.get(8) is None  # remembered within the range
    the_client(first).registered[8] = SCHEMA
    assert SchemaLookup(settings).get(8).schema == SCHEMA
    assert the_client(first).asked == [8, 8]


def test_registries_and_credentials_do_not_share_what_they_found():
    """Another registry, or the same one with other credentials, asks for itself: a schema
    read with good credentials is never handed to a lookup whose credentials are refused."""
    SchemaLookup(RegistrySettings("http://registry:8081", "user:right")).get(7)
    for settings in (
        RegistrySettings("http://registry:8081", "user:wrong"),
        RegistrySettings("http://other:8081", "user:right"),
    ):
        lookup = SchemaLookup(settings)
        lookup.get(7)
        assert the_client(lookup).asked == [7]
    assert len(FakeClient.built) == 3


def test_subject_versions_are_shared_too():
    settings = RegistrySettings("http://registry:8081")
    reference = SchemaReference("common.proto", "common", 1)
    SchemaLookup(settings).get_reference(reference)
    lookup = SchemaLookup(settings)
    assert lookup.get_reference(reference).schema_id == 9
    assert the_client(lookup).asked == [("common", 1), 7]


def test_forgetting_is_what_a_fresh_worker_starts_with():
    settings = RegistrySettings("http://registry:8081")
    SchemaLookup(settings).get(7)
    schema_registry.forget_found_schemas()
    lookup = SchemaLookup(settings)
    lookup.get(7)
    assert the_client(lookup).asked == [7] and len(FakeClient.built) == 2
