"""``.proto`` text → descriptors: a registry schema's references gathered transitively (each
under its import name), compiled by grpcio-tools' protoc with the well-known types on the
include path; registry references read and cached through SchemaLookup (confluent-kafka's
client faked at its boundary)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kbqe_dagster.core.errors import UnmappableProtobufSchemaError
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files, registry_proto_files
from kbqe_dagster.resources.schema_registry import (
    RegisteredSchema,
    RegistrySettings,
    RegistryUnavailableError,
    SchemaLookup,
    SchemaReference,
)

MONEY = SchemaReference("acme/money.proto", "acme-money", 2)
UNIT = SchemaReference("acme/unit.proto", "acme-unit", 1)
TEXTS = {
    ("acme-money", 2): RegisteredSchema(
        31,
        "PROTOBUF",
        'syntax = "proto3"; package acme; import "acme/unit.proto"; '
        "message Money { Unit unit = 1; int64 amount = 2; }",
        (UNIT,),
    ),
    ("acme-unit", 1): RegisteredSchema(
        32, "PROTOBUF", 'syntax = "proto3"; package acme; message Unit { string code = 1; }'
    ),
}
ROOT = (
    'syntax = "proto3"; package shop; import "acme/money.proto"; '
    'import "google/protobuf/timestamp.proto"; '
    "message Order { acme.Money total = 1; google.protobuf.Timestamp at = 2; }"
)


class Lookup:
    def __init__(self) -> None:
        self.asked: list[SchemaReference] = []

    def get_reference(self, reference: SchemaReference) -> RegisteredSchema | None:
        self.asked.append(reference)
        return TEXTS.get((reference.subject, reference.version))


def test_references_are_gathered_transitively_under_their_import_names() -> None:
    lookup = Lookup()
    files = registry_proto_files(lookup, RegisteredSchema(30, "PROTOBUF", ROOT, (MONEY, MONEY)))
    assert files == {
        ROOT_FILE: ROOT,
        "acme/money.proto": TEXTS[("acme-money", 2)].schema,
        "acme/unit.proto": TEXTS[("acme-unit", 1)].schema,
    }
    assert lookup.asked == [MONEY, UNIT]  # a name met twice is fetched once


def test_a_reference_the_registry_lacks_is_an_unmappable_schema() -> None:
    lost = SchemaReference("acme/money.proto", "acme-money", 5)
    with pytest.raises(
        UnmappableProtobufSchemaError,
        match=r"reference 'acme/money.proto' \(subject 'acme-money' version 5\)",
    ):
        registry_proto_files(Lookup(), RegisteredSchema(30, "PROTOBUF", ROOT, (lost,)))


def test_the_set_holds_the_schema_and_its_imports_well_known_types_included() -> None:
    files = registry_proto_files(Lookup(), RegisteredSchema(30, "PROTOBUF", ROOT, (MONEY,)))
    names = [f.name for f in compile_files(files).file]
    assert set(names) == {
        ROOT_FILE,
        "acme/money.proto",
        "acme/unit.proto",
        "google/protobuf/timestamp.proto",
    }
    assert names[-1] == ROOT_FILE  # dependencies first: a DescriptorPool takes them in order


@pytest.mark.parametrize("name", ["../escape.proto", "/etc/x.proto", ""])
def test_a_reference_name_that_is_not_a_relative_path_is_refused(name: str) -> None:
    with pytest.raises(UnmappableProtobufSchemaError, match="not a relative import path"):
        compile_files({ROOT_FILE: 'syntax = "proto3";', name: 'syntax = "proto3";'})


def test_protoc_diagnostics_name_the_file_and_line() -> None:
    with pytest.raises(
        UnmappableProtobufSchemaError,
        match=r'does not compile: kbqe_registry_schema.proto:2:.*"Nope" is not defined',
    ):
        compile_files({ROOT_FILE: 'syntax = "proto3";\nmessage M { Nope n = 1; }'})


class Client:
    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.calls = 0

    def get_version(self, subject: str, version: int):
        self.calls += 1
        if self.status is not None:
            raise SchemaRegistryError(self.status, self.status * 100, "no")
        schema = SimpleNamespace(
            schema_type="PROTOBUF",
            schema_str="text",
            references=[SimpleNamespace(name="a.proto", subject="a", version="3")],
        )
        return SimpleNamespace(schema_id=41, schema=schema, subject=subject, version=version)


@pytest.fixture
def lookup_with(monkeypatch):
    """A lookup whose confluent-kafka client is ``client`` (faked at its boundary), with an
    empty process-wide cache (SchemaLookup shares what it found per registry and process)."""
    from kbqe_dagster.resources import schema_registry

    monkeypatch.setattr(schema_registry, "_CACHES", {})

    def make(client: Client) -> SchemaLookup:
        monkeypatch.setattr(schema_registry, "SchemaRegistryClient", lambda config: client)
        monkeypatch.setattr(schema_registry, "_CACHES", {})
        return SchemaLookup(RegistrySettings("http://127.0.0.1:9"))

    return make


def test_a_referenced_version_is_read_with_its_own_references_and_cached(lookup_with) -> None:
    client = Client()
    lookup = lookup_with(client)
    found = lookup.get_reference(MONEY)
    assert found == RegisteredSchema(41, "PROTOBUF", "text", (SchemaReference("a.proto", "a", 3),))
    assert lookup.get_reference(MONEY) is found and client.calls == 1  # a version never changes


def test_a_missing_reference_is_none_and_a_failing_registry_is_an_error(lookup_with) -> None:
    assert lookup_with(Client(404)).get_reference(MONEY) is None
    with pytest.raises(RegistryUnavailableError, match="subject 'acme-money' version 2"):
        lookup_with(Client(500)).get_reference(MONEY)


def test_a_compiled_set_is_kept_on_disk_for_the_next_process(tmp_path, monkeypatch) -> None:
    """Every stage run starts fresh workers: the set protoc compiled for the same texts in an
    earlier process is read back instead of running protoc again; a damaged entry is compiled
    again; a refusal is not kept."""
    import subprocess
    import tempfile

    from kbqe_dagster.resources import protobuf_compiler

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    files = {ROOT_FILE: 'syntax = "proto3";\npackage cached.t;\nmessage Kept { int64 id = 1; }\n'}
    first = compile_files(files)
    protobuf_compiler._compile.cache_clear()  # as a fresh process starts
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("protoc ran again"))
    assert compile_files(files) == first
    [entry] = (tmp_path / f"{protobuf_compiler.CACHE_DIR}-{__import__('os').getuid()}").iterdir()
    entry.write_bytes(b"\xff not a descriptor set")
    protobuf_compiler._compile.cache_clear()
    monkeypatch.setattr(subprocess, "run", real_run)
    assert compile_files(files) == first
    with pytest.raises(UnmappableProtobufSchemaError):
        compile_files({ROOT_FILE: "syntax = nonsense"})
    assert len(list(entry.parent.iterdir())) == 1
