"""Reading the committed bad-input corpus (``bad_input/``, see its README.md): the corpus
schemas, the cases with their bytes and expectations, the pipeline the expectations assume,
and fake Kafka messages / a fake schema lookup for unit tests."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.staging.kernel_equality import Msg

CORPUS_DIR = Path(__file__).resolve().parent / "bad_input"
STAGED = "staged"
# Kafka timestamp of the message at offset 0 (fake messages and the produced ones alike).
BASE_TIMESTAMP_MS = 1_726_238_205_000


@dataclass(frozen=True)
class CorpusSchema:
    name: str
    schema_type: str  # AVRO or JSON, as the registry's ``schemaType``
    text: str  # exactly what is registered

    @property
    def parsed(self) -> Any:
        """What ``SchemaLookup`` hands out: parsed JSON for AVRO, the raw string otherwise."""
        return json.loads(self.text) if self.schema_type == "AVRO" else self.text


@dataclass(frozen=True)
class CorpusCase:
    name: str
    expect: str  # a core.reasons.Reason value, or "staged"
    why: str
    schema: str | None  # frame the stored body with this schema's registered id
    body: bytes | None  # value.bin: the Avro body (schema set) or the whole value; None: tombstone
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    table: tuple[str, str] | None
    event_date: str | None

    @property
    def is_control(self) -> bool:
        return self.expect == STAGED

    def value(self, ids: Mapping[str, int]) -> bytes | None:
        """The Kafka message value, framed with the id ``ids`` gives the case's schema."""
        if self.body is None or self.schema is None:
            return self.body
        return encode_frame(ids[self.schema], self.body)


@dataclass(frozen=True)
class Corpus:
    schemas: dict[str, CorpusSchema]
    cases: tuple[CorpusCase, ...]
    pipeline_template: dict

    def pipeline(self, topic: str, on_bad_input: str = "dead_letter") -> PipelineConfig:
        raw = json.loads(json.dumps(self.pipeline_template))
        raw["topics"][0].update(name=topic, on_bad_input=on_bad_input)
        return parse_pipeline_config(raw, source="bad-input corpus")

    @property
    def bad(self) -> tuple[CorpusCase, ...]:
        return tuple(c for c in self.cases if not c.is_control)

    @property
    def controls(self) -> tuple[CorpusCase, ...]:
        return tuple(c for c in self.cases if c.is_control)

    def expected_reasons(self) -> Counter[str]:
        return Counter(c.expect for c in self.bad)


def load_corpus(directory: Path = CORPUS_DIR) -> Corpus:
    manifest = yaml.safe_load((directory / "cases.yaml").read_text())
    schemas = {
        name: CorpusSchema(name, entry["type"], (directory / entry["file"]).read_text())
        for name, entry in manifest["schemas"].items()
    }
    cases = []
    for entry in manifest["cases"]:
        case_dir = directory / "cases" / entry["name"]
        value_file, key_file = case_dir / "value.bin", case_dir / "key.bin"
        if entry.get("tombstone"):
            assert not value_file.exists(), f"{entry['name']}: a tombstone has no value.bin"
        table = entry.get("table")
        cases.append(
            CorpusCase(
                name=entry["name"],
                expect=entry["expect"],
                why=entry["why"],
                schema=entry.get("schema"),
                body=None if entry.get("tombstone") else value_file.read_bytes(),
                key=key_file.read_bytes() if key_file.exists() else None,
                headers=tuple(
                    (k, None if v is None else v.encode()) for k, v in entry.get("headers", [])
                ),
                table=tuple(table.split(".")) if table else None,
                event_date=entry.get("event_date"),
            )
        )
    return Corpus(schemas, tuple(cases), manifest["pipeline"])


# --- fakes at the Kafka and registry boundaries ----------------------------------------------
class FakeMessage(Msg):
    """What the stager reads from a confluent_kafka ``Message``, from a corpus case."""

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None,
                 key: bytes | None, headers: Sequence[tuple[str, bytes | None]],
                 timestamp_ms: int) -> None:  # fmt: skip
        # confluent_kafka returns None without headers; CreateTime timestamps.
        super().__init__(
            topic, partition, offset, value, key, list(headers) or None, (1, timestamp_ms)
        )


def fake_messages(cases: Sequence[CorpusCase], ids: Mapping[str, int], topic: str,
                  partition: int = 0, first_offset: int = 0) -> list[FakeMessage]:  # fmt: skip
    return [
        FakeMessage(
            topic,
            partition,
            first_offset + i,
            case.value(ids),
            case.key,
            case.headers,
            BASE_TIMESTAMP_MS + i,
        )
        for i, case in enumerate(cases)
    ]


class FakeSchemaLookup:
    """``SchemaLookup`` at the registry boundary: the corpus schemas under fixed ids."""

    def __init__(self, schemas: Mapping[str, CorpusSchema], ids: Mapping[str, int]) -> None:
        self._by_id = {ids[name]: s for name, s in schemas.items()}
        self.asked: list[int] = []

    def get(self, schema_id: int) -> RegisteredSchema | None:
        self.asked.append(schema_id)
        found = self._by_id.get(schema_id)
        if found is None:
            return None
        return RegisteredSchema(schema_id, found.schema_type, found.parsed)
