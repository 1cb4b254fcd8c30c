"""Staging file names — the contract shared with the original Kafka BigQuery Express project.

    $topic.$partition.$dataset.$table.$schemaId.$firstOffset.avro
    $topic.$partition.$dataset.$table.$schemaId.$firstOffset.$lastOffset.done

Names are parsed from the right: the numbers are numbers, dataset and table never contain
dots, and whatever remains on the left is the topic, so ``com.acme.events`` works. A name
that does not parse is not ours; callers report it and go on (never fatal).

A done file matches exactly one avro file on the **full** key, schema id included: the
original matched without the schema id and lost data when one window wrote two schema ids.
``lastOffset`` is inclusive.

A range delivered through the Storage Write API (core/protocol/delivery.py) also writes, per
table, an **intent** before its first append, and a **refusal note** per request the API
refused rows of; both parse from the right like a done file:

    $topic.$partition.$dataset.$table.$schemaId.$firstOffset.$lastOffset.intent
    $topic.$partition.$dataset.$table.$schemaId.$firstOffset.$lastOffset.$rowOffset.refused
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

AVRO_SUFFIX = "avro"
DONE_SUFFIX = "done"
INTENT_SUFFIX = "intent"
REFUSED_SUFFIX = "refused"

# Kafka's legal topic characters; dots are legal, which is why names parse from the right.
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# BigQuery dataset ids are [A-Za-z0-9_]; table ids allow more (dashes, unicode) but never a
# dot, and a slash would make the name a path.
DATASET_RE = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
# No control characters either: BigQuery refuses them, and a NUL cannot be in a file name
# (a record routed there must be unroutable, not crash the stage task).
TABLE_RE = re.compile(r"^[^./\s\x00-\x1f\x7f-\x9f]{1,1024}$")
_NUMBER_RE = re.compile(r"^(0|[1-9][0-9]*)$")


@dataclass(frozen=True, order=True)
class FileKey:
    """Everything that identifies one staged avro file; the done file adds its last offset."""

    topic: str
    partition: int
    dataset: str
    table: str
    schema_id: int
    first_offset: int

    def __post_init__(self) -> None:
        problem = _key_problem(self)
        if problem:
            raise ValueError(f"invalid staging file key {self!r}: {problem}")

    @property
    def table_id(self) -> tuple[str, str]:
        return (self.dataset, self.table)

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def _stem(self) -> str:
        return (
            f"{self.topic}.{self.partition}.{self.dataset}.{self.table}."
            f"{self.schema_id}.{self.first_offset}"
        )


@dataclass(frozen=True, order=True)
class AvroFileName:
    """An avro file holding records of one (topic, partition, table, schema id) of one range."""

    key: FileKey

    @property
    def name(self) -> str:
        return f"{self.key._stem()}.{AVRO_SUFFIX}"

    def done(self, last_offset: int) -> DoneFileName:
        return DoneFileName(self.key, last_offset)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, order=True)
class DoneFileName:
    """The commit marker of one avro file: offsets ``first..last`` (inclusive) are staged."""

    key: FileKey
    last_offset: int

    def __post_init__(self) -> None:
        if self.last_offset < self.key.first_offset:
            raise ValueError(
                f"done file for {self.key.topic}[{self.key.partition}] ends at offset "
                f"{self.last_offset}, before its first offset {self.key.first_offset}"
            )

    @property
    def name(self) -> str:
        return f"{self.key._stem()}.{self.last_offset}.{DONE_SUFFIX}"

    @property
    def avro(self) -> AvroFileName:
        return AvroFileName(self.key)

    @property
    def first_offset(self) -> int:
        return self.key.first_offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, order=True)
class IntentFileName:
    """Before the first Storage Write append of range ``first..last`` to a table: the stream
    and row offset its rows go to (core/protocol/delivery.py)."""

    key: FileKey
    last_offset: int

    @property
    def name(self) -> str:
        return f"{self.key._stem()}.{self.last_offset}.{INTENT_SUFFIX}"

    @property
    def first_offset(self) -> int:
        return self.key.first_offset

    @property
    def done(self) -> DoneFileName:
        return DoneFileName(self.key, self.last_offset)

    def refusal(self, row_offset: int) -> RefusalFileName:
        return RefusalFileName(self.key, self.last_offset, row_offset)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, order=True)
class RefusalFileName:
    """The rows the Storage Write API refused of the request at ``row_offset`` of an intent's
    stream, and why (core/protocol/delivery.py)."""

    key: FileKey
    last_offset: int
    row_offset: int

    @property
    def name(self) -> str:
        return f"{self.key._stem()}.{self.last_offset}.{self.row_offset}.{REFUSED_SUFFIX}"

    @property
    def intent(self) -> IntentFileName:
        return IntentFileName(self.key, self.last_offset)

    def __str__(self) -> str:
        return self.name


StagingName = AvroFileName | DoneFileName | IntentFileName | RefusalFileName


def _key_problem(key: FileKey) -> str | None:
    if not TOPIC_RE.fullmatch(key.topic):
        return f"topic {key.topic!r} is not a legal Kafka topic name"
    if key.partition < 0:
        return f"partition {key.partition} is negative"
    if not DATASET_RE.fullmatch(key.dataset):
        return f"dataset {key.dataset!r} must be letters, digits and underscores"
    if not TABLE_RE.fullmatch(key.table):
        return f"table {key.table!r} must be non-empty without dots, slashes, spaces or control characters"
    if key.schema_id < 0:
        return f"schema id {key.schema_id} is negative"
    if key.first_offset < 0:
        return f"first offset {key.first_offset} is negative"
    return None


def basename(path: str) -> str:
    """The file name of a staging path (``gs://b/p/x.avro`` or ``/dir/x.avro`` → ``x.avro``)."""
    return path.rsplit("/", 1)[-1]


def parse_name(name: str) -> StagingName | None:
    """Parse a staging file name (or path); ``None`` when it is not a staging name."""
    parts = basename(name).split(".")
    if parts[-1] == AVRO_SUFFIX:
        numbers_needed, fixed = 2, 6  # schemaId, firstOffset | partition..firstOffset + suffix
    elif parts[-1] in (DONE_SUFFIX, INTENT_SUFFIX):
        numbers_needed, fixed = 3, 7
    elif parts[-1] == REFUSED_SUFFIX:
        numbers_needed, fixed = 4, 8
    else:
        return None
    if len(parts) <= fixed:
        return None
    topic = ".".join(parts[:-fixed])
    partition, dataset, table = parts[-fixed], parts[-fixed + 1], parts[-fixed + 2]
    numbers = parts[-1 - numbers_needed : -1]
    if not _NUMBER_RE.fullmatch(partition) or not all(_NUMBER_RE.fullmatch(n) for n in numbers):
        return None
    try:
        key = FileKey(topic, int(partition), dataset, table, int(numbers[0]), int(numbers[1]))
        if parts[-1] == AVRO_SUFFIX:
            return AvroFileName(key)
        if parts[-1] == INTENT_SUFFIX:
            return IntentFileName(key, int(numbers[2]))
        if parts[-1] == REFUSED_SUFFIX:
            return RefusalFileName(key, int(numbers[2]), int(numbers[3]))
        return DoneFileName(key, int(numbers[2]))
    except ValueError:
        return None


@dataclass(frozen=True)
class ParsedListing:
    """A staging listing sorted into avro files, done files and names that are not ours
    (and the Storage Write intents and refusal notes, core/protocol/delivery.py)."""

    avro: tuple[AvroFileName, ...]
    done: tuple[DoneFileName, ...]
    unrecognized: tuple[str, ...]
    intents: tuple[IntentFileName, ...] = ()
    refusals: tuple[RefusalFileName, ...] = ()


def parse_listing(names: Iterable[str]) -> ParsedListing:
    """Sort names into avro and done files; everything else is reported, never fatal."""
    avro: list[AvroFileName] = []
    done: list[DoneFileName] = []
    unrecognized: list[str] = []
    intents: list[IntentFileName] = []
    refusals: list[RefusalFileName] = []
    for name in names:
        parsed = parse_name(name)
        if isinstance(parsed, AvroFileName):
            avro.append(parsed)
        elif isinstance(parsed, DoneFileName):
            done.append(parsed)
        elif isinstance(parsed, IntentFileName):
            intents.append(parsed)
        elif isinstance(parsed, RefusalFileName):
            refusals.append(parsed)
        else:
            unrecognized.append(name)
    return ParsedListing(
        tuple(sorted(avro)),
        tuple(sorted(done)),
        tuple(unrecognized),
        tuple(sorted(intents)),
        tuple(sorted(refusals)),
    )


STAGING_ASSET = "staging"
"""The Dagster asset of the staging area (``AssetKey(["staging"])``), named here so the event
log readers (observability/) need not import the definitions."""


def topic_prefix(topic: str) -> str:
    """The listing prefix of a topic's staging files. It also lists ``topic.sub``'s files
    (dots are legal in topic names): :func:`of_topic` keeps exactly the topic's."""
    return topic + "."


def of_topic(names: Iterable[str], topic: str) -> tuple[list[str], list[str]]:
    """Of names listed under :func:`topic_prefix`: the staging names of exactly ``topic``,
    and the names that are not staging names at all (reported, never touched)."""
    ours, unrecognized = [], []
    for name in names:
        parsed = parse_name(name)
        if parsed is None:
            unrecognized.append(name)
        elif parsed.key.topic == topic:
            ours.append(name)
    return ours, unrecognized
