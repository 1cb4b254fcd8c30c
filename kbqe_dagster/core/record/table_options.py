"""A table's options under ``tables:`` besides its partitioning: clustering, partition
expiration, labels and description; what BigQuery accepts for each; and the one table update
that brings an existing table in step with them.

**What kbqe manages.** Only what the configuration states. An option a ``tables:`` entry
does not name is left as the table has it (set by hand, by Terraform, by another tool):

- ``clustering`` named: the table is clustered exactly so (``[]``: not clustered);
- ``partition_expiration_days`` named for the table (``null``: partitions never expire), else
  the global ``load.partition_expiration_days`` when that is set;
- ``labels``: each named label is set to its value; a label the configuration no longer
  names is *not* removed (kbqe cannot tell a label it set from one somebody else did;
  remove it with ``bq update --remove_label``). Labels ``kbqe-feed-*`` are kbqe's own
  (core/load/feeds.py) and cannot be named;
- ``description`` named: the table's description is exactly it;
- ``require_partition_filter`` named: queries on the table must filter on its partition
  column, and every statement kbqe runs does (core/record/partition_filter.py). Only a
  time-partitioned table takes it (a keyed current table has no partitions: its changelog
  does).

Internal clustering is always managed: a keyed topic's changelog stays clustered by Kafka
partition and offset (its MERGE reads offset ranges), whatever ``tables:`` says.

**Clustering columns** follow BigQuery's rules: at most four, top-level, not repeated, of a
type BigQuery clusters on (:data:`CLUSTERABLE_TYPES`). Where a table's columns are known,
each named column is checked and a wrong one refused naming it: at configuration time for the
enrichment columns and the columns of a ``format: json`` topic's declared schema, at load time
against the staged file's schema (core/config/pipeline.py, loading/coordinator.py).

**Updates** (:func:`table_update`): labels, description, clustering, partition expiration
and ``require_partition_filter`` can all change on an existing table (one ``tables.patch``
with a field mask); a change of clustering applies to data written after it, BigQuery
reclusters older data in the background only for new writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DAY_MS = 86_400_000
NEVER_EXPIRES = 0
"""``partition_expiration_days: null`` for one table: its partitions never expire, whatever
the global setting says."""
MAX_CLUSTERING_COLUMNS = 4
MAX_LABELS = 64
MAX_LABEL_CHARS = 63
MAX_DESCRIPTION_CHARS = 16_384
RESERVED_LABEL_PREFIX = "kbqe-feed-"
"""kbqe's own table labels: which staging area feeds the table (core/load/feeds.py)."""

CLUSTERABLE_TYPES = frozenset(
    {
        "BIGNUMERIC", "BOOL", "BOOLEAN", "DATE", "DATETIME", "GEOGRAPHY", "INT64", "INTEGER",
        "NUMERIC", "RANGE", "STRING", "TIMESTAMP",
    }
)  # fmt: skip
"""BigQuery's clusterable column types (legacy names INTEGER and BOOLEAN included)."""

_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]*$")


# --- checks of single values (config converters use them) -----------------------------------
def clustering_list_problem(columns: tuple[str, ...]) -> str | None:
    """What is wrong with a ``clustering:`` list by itself; None when nothing."""
    if len(columns) > MAX_CLUSTERING_COLUMNS:
        return f"BigQuery clusters on at most {MAX_CLUSTERING_COLUMNS} columns, got {len(columns)}"
    seen: set[str] = set()
    for name in columns:
        if not _COLUMN_NAME.match(name):
            return f"column {name!r} is not a top-level column name (letters, digits, _)"
        if name.lower() in seen:
            return f"column {name!r} is named twice (BigQuery column names ignore case)"
        seen.add(name.lower())
    return None


def labels_problem(labels: Mapping[str, str]) -> str | None:
    """BigQuery's label rules: at most 64; keys start with a lowercase letter; keys and values
    hold lowercase letters, digits, ``_`` and ``-``, at most 63 characters (values may be
    empty); ``kbqe-feed-*`` keys are kbqe's own."""
    if len(labels) > MAX_LABELS:
        return f"BigQuery allows at most {MAX_LABELS} labels per table, got {len(labels)}"
    for key, value in labels.items():
        if len(key) > MAX_LABEL_CHARS or not _LABEL_KEY.match(key):
            return (
                f"label key {key!r}: must start with a lowercase letter and hold only "
                f"lowercase letters, digits, '_' and '-', at most {MAX_LABEL_CHARS} characters"
            )
        if key.startswith(RESERVED_LABEL_PREFIX):
            return f"label key {key!r}: {RESERVED_LABEL_PREFIX}* labels are kbqe's own (feeds)"
        if len(value) > MAX_LABEL_CHARS or not _LABEL_VALUE.match(value):
            return (
                f"label {key!r} value {value!r}: only lowercase letters, digits, '_' and '-', "
                f"at most {MAX_LABEL_CHARS} characters"
            )
    return None


def description_problem(text: str) -> str | None:
    if len(text) > MAX_DESCRIPTION_CHARS:
        return f"at most {MAX_DESCRIPTION_CHARS:,} characters, got {len(text):,}"
    return None


# --- clustering against a table's columns ----------------------------------------------------
def clustering_problems(
    clustering: Iterable[str], columns: Mapping[str, tuple[str, str]], where: str
) -> list[str]:
    """Each clustering column that ``columns`` (name → (BigQuery type, mode), top-level) refutes,
    as a message naming it and ``where`` (the table, or its configuration key)."""
    known = {name.lower(): (name, kind, mode) for name, (kind, mode) in columns.items()}
    out = []
    for name in clustering:
        found = known.get(name.lower())
        if found is None:
            listed = ", ".join(columns) or "none"
            out.append(f"{where}: clustering column {name!r} is not a column (columns: {listed})")
        elif found[2] == "REPEATED":
            out.append(f"{where}: clustering column {name!r} is repeated (an array)")
        elif found[1].upper() not in CLUSTERABLE_TYPES:
            out.append(
                f"{where}: clustering column {name!r} is {found[1]}; BigQuery clusters only on "
                f"{', '.join(sorted(CLUSTERABLE_TYPES - {'BOOLEAN', 'INTEGER'}))}"
            )
    return out


def avro_columns(schema: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The top-level columns an Avro record schema loads as (BigQuery's Avro conversion with
    logical types: resources/bigquery/schema.py has the full mapping), as name → (type, mode).
    Only as precise as clustering needs: RECORD for anything nested."""
    out: dict[str, tuple[str, str]] = {}
    for f in schema.get("fields", ()):
        if isinstance(f, Mapping) and isinstance(f.get("name"), str):
            out[f["name"]] = _avro_column(f.get("type"))
    return out


_AVRO_PRIMITIVES = {
    "string": "STRING", "int": "INTEGER", "long": "INTEGER", "boolean": "BOOLEAN",
    "float": "FLOAT", "double": "FLOAT", "bytes": "BYTES", "enum": "STRING", "fixed": "BYTES",
    "record": "RECORD", "null": "NULL",
}  # fmt: skip
_AVRO_LOGICAL = {
    "date": "DATE", "time-millis": "TIME", "time-micros": "TIME",
    "timestamp-millis": "TIMESTAMP", "timestamp-micros": "TIMESTAMP",
    "local-timestamp-millis": "DATETIME", "local-timestamp-micros": "DATETIME",
    "decimal": "NUMERIC", "uuid": "STRING",
}  # fmt: skip


def _avro_column(kind: Any) -> tuple[str, str]:
    if isinstance(kind, list):
        branches = [b for b in kind if b != "null"]
        return _avro_column(branches[0]) if len(branches) == 1 else ("UNION", "NULLABLE")
    if isinstance(kind, Mapping):
        if kind.get("type") in ("array", "map"):
            return ("RECORD" if kind["type"] == "map" else _avro_column(kind.get("items"))[0],
                    "REPEATED")  # fmt: skip
        if kind.get("sqlType") == "JSON":
            return ("JSON", "NULLABLE")
        logical = _AVRO_LOGICAL.get(str(kind.get("logicalType")))
        return (logical or _AVRO_PRIMITIVES.get(str(kind.get("type")), "RECORD"), "NULLABLE")
    return (_AVRO_PRIMITIVES.get(str(kind), "RECORD"), "NULLABLE")


# --- a table's options: wanted and current ---------------------------------------------------
@dataclass(frozen=True)
class TableOptions:
    """What kbqe wants of one table (module docstring: None means "not managed")."""

    clustering: tuple[str, ...] | None = None
    """The clustering columns (``()``: none); None: the table keeps whatever it has."""
    partition_expiration_days: int | None = None
    """Days a partition lives (:data:`NEVER_EXPIRES`: forever); None: left as it is."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels set on the table (others it carries are kept)."""
    description: str | None = None
    """The table's description; None: left as it is."""
    require_partition_filter: bool | None = None
    """Queries must filter on the partition column (core/record/partition_filter.py); None:
    left as it is. Only a time-partitioned table takes it."""

    @property
    def expiration_ms(self) -> int | None:
        """``timePartitioning.expirationMs`` of :attr:`partition_expiration_days` (None:
        never; only meaningful when that is managed)."""
        days = self.partition_expiration_days
        return days * DAY_MS if days else None


@dataclass(frozen=True)
class TableMetadata:
    """What an existing table has, from its metadata (free to read)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    description: str | None = None
    clustering: tuple[str, ...] = ()
    partitioned: bool = True
    """Whether the table has time partitions (a keyed current table has none)."""
    expiration_ms: int | None = None
    require_partition_filter: bool = False
    partition_type: str | None = None
    """``timePartitioning.type`` (``DAY``, ``HOUR``, ``MONTH``, ``YEAR``); None: none."""
    partition_field: str | None = None
    """``timePartitioning.field``; None: by ingestion time, or not partitioned."""


@dataclass(frozen=True)
class TableUpdate:
    """The fields one ``tables.patch`` changes, and their new values; no fields: in step."""

    fields: tuple[str, ...] = ()
    """Field names of ``google.cloud.bigquery.Table``: ``labels``, ``description``,
    ``clustering_fields``, ``time_partitioning``, ``require_partition_filter``."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The labels to set (only these: a patch of ``labels`` merges by key)."""
    description: str | None = None
    clustering: tuple[str, ...] | None = None
    """New clustering (None in the patch: not clustered any more)."""
    expiration_ms: int | None = None
    changes: tuple[str, ...] = ()
    """What changes, for the log: ``clustering (a) -> (b)``."""
    require_partition_filter: bool = False

    def __bool__(self) -> bool:
        return bool(self.fields)


def table_update(current: TableMetadata, wanted: TableOptions) -> TableUpdate:
    """The update that gives ``current`` what ``wanted`` states, and nothing else."""
    fields: list[str] = []
    changes: list[str] = []
    labels = {k: v for k, v in wanted.labels.items() if current.labels.get(k) != v}
    if labels:
        fields.append("labels")
        changes += [f"label {k}: {current.labels.get(k)!r} -> {v!r}" for k, v in labels.items()]
    description = None
    if wanted.description is not None and wanted.description != (current.description or ""):
        fields.append("description")
        description = wanted.description
        changes.append("description")
    clustering = None
    if wanted.clustering is not None and tuple(wanted.clustering) != tuple(current.clustering):
        fields.append("clustering_fields")
        clustering = wanted.clustering or None
        changes.append(f"clustering ({', '.join(current.clustering)}) -> ({', '.join(wanted.clustering)})")  # fmt: skip
    expiration = None
    if (
        wanted.partition_expiration_days is not None
        and current.partitioned
        and wanted.expiration_ms != current.expiration_ms
    ):
        fields.append("time_partitioning")
        expiration = wanted.expiration_ms
        changes.append(
            f"partition expiration {_days(current.expiration_ms)} -> {_days(expiration)}"
        )
    required = wanted.require_partition_filter
    if (
        required is not None
        and current.partitioned
        and required != current.require_partition_filter
    ):
        fields.append("require_partition_filter")
        changes.append(f"require_partition_filter {current.require_partition_filter} -> {required}")
    return TableUpdate(
        tuple(fields),
        labels,
        description,
        clustering or None,
        expiration,
        tuple(changes),
        bool(required),
    )


def _days(ms: int | None) -> str:
    return "never" if not ms else f"{ms / DAY_MS:g} days"
