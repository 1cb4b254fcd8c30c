"""The sections of the pipeline file: one frozen dataclass per section, each field documented
with its default, next to the table saying how each YAML key is read and checked.

``core/config/pipeline.py`` assembles them into a :class:`~kbqe_dagster.core.config.pipeline.PipelineConfig`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.load.selection import DEFAULT_JOB_ID_PREFIX, MAX_FILES_PER_JOB
from kbqe_dagster.core.protocol.offsets import MARKER_DATASET, StartPolicy
from kbqe_dagster.core.record.event_time import DateRule, EpochUnit
from kbqe_dagster.core.record.routing import (
    RoutingMode,
    is_valid_dataset,
    is_valid_table,
    name_problem,
)

# Avro field names, which are also valid BigQuery column names (at most 300 characters).
_COLUMN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,299}")
# BigQuery refuses column names with these prefixes (case-insensitive).
_RESERVED_COLUMN_PREFIXES = ("_table_", "_file_", "_partition", "_row_timestamp", "__root__",
                             "_colidentifier")  # fmt: skip
_JOB_ID_PREFIX_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class BadInputPolicy(StrEnum):
    """What happens to a message that cannot be staged (DESIGN.md §2)."""

    DEAD_LETTER = "dead_letter"
    """Raw bytes, key, headers, location and reason go to dead-letter files and table."""
    SKIP = "skip"
    """Dropped, but counted per reason in the run's metadata and metrics."""
    FAIL = "fail"
    """The topic's stage run fails with an error naming topic, partition and offset."""


class FileCodec(StrEnum):
    """Compression codec of staged Avro container files (all three load into BigQuery)."""

    SNAPPY = "snappy"
    DEFLATE = "deflate"
    NULL = "null"


@dataclass(frozen=True)
class StagingSettings:
    """Stage-run knobs: pipeline-wide under ``staging:``, overridable per topic."""

    allowed_latency: timedelta = timedelta(minutes=15)
    """Stage a topic once its oldest unstaged message is older than this. Default ``15m``."""
    max_messages_per_batch: int = 1_000_000
    """Stage a topic as soon as its backlog reaches this many messages. Default 1,000,000."""
    max_messages_per_run: int = 5_000_000
    """At most this many offsets per partition in one stage run; the rest waits for the next
    run, so a huge backlog drains in bounded runs. Default 5,000,000."""
    max_messages_per_range: int = 500_000
    """A partition's offsets are split into ranges of at most this many offsets, one Spark task
    each, so a hot partition is staged in parallel. Default 500,000."""
    min_bytes_per_file: int = 1 << 20
    """Reserved: validated and kept, but not used yet. The stage trigger is the message count
    (``max_messages_per_batch``) or the age (``allowed_latency``); Kafka gives no cheap byte
    count of a backlog, so a byte threshold needs an estimate first. Default ``1MiB``."""
    max_message_size: int = 10 << 20
    """Message values larger than this are bad input with reason ``oversized``. Default
    ``10MiB`` (BigQuery's own limit for an Avro row is far higher)."""
    file_codec: FileCodec = FileCodec.SNAPPY
    """Codec of staged avro files: ``snappy`` (default), ``deflate`` or ``null``."""
    start_offset: StartPolicy = StartPolicy.EARLIEST
    """Where a partition with no done file starts: ``earliest`` (default) or ``latest``."""
    loop_interval: timedelta = timedelta(seconds=1)
    """A topic that may write a ``delivery: storage_write`` table is staged by the stage loop
    (one long run, under the Dagster daemon), which looks at its watermarks this often and
    stages what is new: its rows reach BigQuery about this long after Kafka has them. A round
    with nothing new costs one watermarks request. At least ``100ms``; default ``1s``. A loop
    run of several topics uses the shortest of their intervals."""


STAGING_SPEC: dict[str, r.Converter] = {
    "allowed_latency": r.duration(minimum=timedelta(seconds=1)),
    "max_messages_per_batch": r.integer(minimum=1),
    "max_messages_per_run": r.integer(minimum=1),
    "max_messages_per_range": r.integer(minimum=1),
    "min_bytes_per_file": r.byte_size(),
    "max_message_size": r.byte_size(minimum=6),  # the 5-byte header plus at least one byte
    "file_codec": r.choice(FileCodec, aliases={None: "null"}),  # YAML reads bare null as None
    "start_offset": r.choice(StartPolicy),
    "loop_interval": r.duration(minimum=timedelta(milliseconds=100)),
}


@dataclass(frozen=True)
class LoadSettings:
    """The BigQuery load coordinator (DESIGN.md §4), under ``load:``."""

    cadence: timedelta = timedelta(minutes=15)
    """How often loadable files are grouped into load jobs. Default ``15m``. Bounded by the
    per-table load-job quota (see ``jobs_per_table_per_day`` in core/config/pipeline.py).
    The daemon's schedule rounds it up to a step cron keeps evenly (minutes dividing an
    hour, hours dividing a day: ``7m`` runs every 10 minutes), never down."""
    poll_interval: timedelta = timedelta(minutes=2)
    """How often pending load jobs are polled. Default ``2m``."""
    max_files_per_job: int = MAX_FILES_PER_JOB
    """Source files per load job, at most BigQuery's limit of 10,000 (the default)."""
    job_id_prefix: str = DEFAULT_JOB_ID_PREFIX
    """Prefix of load job ids: letters, digits, ``_`` and ``-``, at most 64. Default ``kbqe``."""
    partition_expiration_days: int | None = None
    """DAY partitions of created tables expire after this many days. Default: never."""
    create_datasets: bool = True
    """Create missing destination and dead-letter datasets before loading. Default true."""
    max_retries: int = 3
    """Failed load jobs are retried with a new id this many times, then their files are
    quarantined and the table's asset check fails. Default 3."""


# BigQuery quota: 1,500 table operations (load jobs included) per table per day. The load
# coordinator submits one job per (table, schema id) per cycle, plus retries. A cadence may use
# at most SAFE_QUOTA_SHARE of the quota with one schema id (else a config error), leaving the
# rest for retries, a second schema id during an evolution and other writers of the table;
# above WARN_QUOTA_SHARE it is accepted with a warning (two schema ids would reach the safe
# share). So: cadence >= ~1m56s is valid, and below 3m50s it warns.
LOAD_JOBS_PER_TABLE_PER_DAY = 1_500
SAFE_QUOTA_SHARE = 0.5
WARN_QUOTA_SHARE = 0.25


def jobs_per_table_per_day(cadence: timedelta, schema_ids: int = 1) -> int:
    """Load jobs one table receives per day at ``cadence`` with ``schema_ids`` schema ids
    pending each cycle (retries not counted)."""
    if cadence <= timedelta(0) or schema_ids < 1:
        raise ValueError(f"need cadence > 0 and schema_ids >= 1, got {cadence}, {schema_ids}")
    return math.ceil(timedelta(days=1) / cadence) * schema_ids


def cadence_quota_verdict(cadence: timedelta) -> tuple[str | None, str | None]:
    """``(error, warning)`` for a load cadence against the per-table load-job quota."""
    jobs = jobs_per_table_per_day(cadence)
    share = jobs / LOAD_JOBS_PER_TABLE_PER_DAY
    spelled = r.format_duration(cadence)
    if share > SAFE_QUOTA_SHARE:
        return (
            f"{spelled} means {jobs:,} load jobs per table per day, over "
            f"{SAFE_QUOTA_SHARE:.0%} of BigQuery's {LOAD_JOBS_PER_TABLE_PER_DAY:,}",
            None,
        )
    if share > WARN_QUOTA_SHARE:
        return None, (
            f"{spelled} uses {share:.0%} of BigQuery's daily load-job quota per table with one "
            "schema id; two schema ids at once would reach the safe share"
        )
    return None, None


LOAD_SPEC: dict[str, r.Converter] = {
    "cadence": r.duration(minimum=timedelta(seconds=1)),
    "poll_interval": r.duration(minimum=timedelta(seconds=1)),
    "max_files_per_job": r.integer(minimum=1, maximum=MAX_FILES_PER_JOB),
    "job_id_prefix": r.checked(
        r.string,
        lambda p: None if _JOB_ID_PREFIX_RE.fullmatch(p) else "use 1-64 of A-Z a-z 0-9 _ -",
    ),
    "partition_expiration_days": r.nullable(r.integer(minimum=1)),
    "create_datasets": r.boolean,
    "max_retries": r.integer(minimum=0, maximum=100),
}


@dataclass(frozen=True)
class RetentionSettings:
    """Housekeeping of the staging area (DESIGN.md §3), under ``retention:``."""

    cadence: timedelta = timedelta(minutes=9)
    """How often deletable done files are removed. Default ``9m``."""
    keep_load_history: timedelta = timedelta(days=7)
    """Finished load jobs stay in the load state file this long, for audit. Default ``7d``."""


RETENTION_SPEC: dict[str, r.Converter] = {
    "cadence": r.duration(minimum=timedelta(seconds=1)),
    "keep_load_history": r.duration(),
}


@dataclass(frozen=True)
class NotificationSettings:
    """Where schema and table notices go besides the Dagster UI and the log, under
    ``notifications:`` (core/load/notices.py)."""

    webhook_url: str | None = None
    """``http(s)://`` URL that receives an HTTP POST of each notice as JSON, with a
    Slack-compatible ``text`` field. Default: none (notices only in Dagster and the log)."""
    timeout: timedelta = timedelta(seconds=5)
    """Per attempt. Default ``5s``."""
    retries: int = 2
    """Further attempts after a failed one. Default ``2``. A notice that still fails is logged
    and dropped: notices never hold a load back."""

    def __post_init__(self) -> None:
        if self.webhook_url is not None and not re.match(r"https?://", self.webhook_url):
            raise ValueError(
                f"webhook_url must start with http:// or https://, got {self.webhook_url!r}"
            )


NOTIFICATION_SPEC: dict[str, r.Converter] = {
    "webhook_url": r.nullable(r.string),
    "timeout": r.duration(minimum=timedelta(milliseconds=100)),
    "retries": r.integer(minimum=0, maximum=10),
}


@dataclass(frozen=True)
class DeadLetterDestination:
    """Where dead letters are loaded, under ``dead_letter:``."""

    dataset: str = "kbqe_dead_letters"
    """Dataset of the dead-letter table. Default ``kbqe_dead_letters``."""
    table: str = "dead_letters"
    """The dead-letter table. Default ``dead_letters``."""

    def is_table(self, dataset: str, table: str) -> bool:
        """Whether ``dataset.table`` is the dead-letter table: the one place that says so."""
        return (dataset, table) == (self.dataset, self.table)

    def __post_init__(self) -> None:
        problem = name_problem(self.dataset, self.table)
        if problem:
            raise ValueError(problem)
        if self.dataset == MARKER_DATASET:
            raise ValueError(f"dataset {MARKER_DATASET!r} is reserved for staging markers")


_DATASET = r.checked(r.string, lambda d: None if is_valid_dataset(d) else "not a dataset name")
_TABLE = r.checked(r.string, lambda t: None if is_valid_table(t) else "not a table name")

DEAD_LETTER_SPEC: dict[str, r.Converter] = {"dataset": _DATASET, "table": _TABLE}


# Enrichment columns are an EnrichmentConfig (core/record/enrichment.py); this reads its YAML keys.
def _column_problem(name: str) -> str | None:
    if not _COLUMN_RE.fullmatch(name):
        return "a column name is a letter or _, then letters, digits or _ (at most 300)"
    if name.lower().startswith(_RESERVED_COLUMN_PREFIXES):
        return f"BigQuery reserves the prefix of {name!r}"
    return None


_COLUMN = r.checked(r.string, _column_problem)

ENRICHMENT_SPEC: dict[str, r.Converter] = {
    "event_date_column": _COLUMN,
    "topic_column": _COLUMN,
    "partition_column": _COLUMN,
    "offset_column": _COLUMN,
    "timestamp_column": r.nullable(_COLUMN),
    "key_column": r.nullable(_COLUMN),
    "headers_column": r.nullable(_COLUMN),
    "event_hour_column": _COLUMN,
}


# --- topic sections backed by core dataclasses -------------------------------------------------
ROUTING_SPEC: dict[str, r.Converter] = {
    "mode": r.choice(RoutingMode),
    "dataset": _DATASET,
    "table": _TABLE,
    "dataset_field": r.string,
    "table_field": r.string,
    "namespace_datasets": r.string_map,
    "function": r.string,
    "function_fields": r.list_of(r.string),
}

# Which routing keys each mode reads; any other key given with that mode is an error.
ROUTING_KEYS_BY_MODE: dict[RoutingMode, frozenset[str]] = {
    RoutingMode.STATIC: frozenset({"dataset", "table"}),
    RoutingMode.FIELDS: frozenset({"dataset_field", "table_field"}),
    RoutingMode.SCHEMA_NAME: frozenset({"dataset", "namespace_datasets"}),
    RoutingMode.FUNCTION: frozenset({"function", "function_fields"}),
}

EVENT_TIME_SPEC: dict[str, r.Converter] = {
    "fields": r.list_of(r.string),
    "epoch_unit": r.choice(EpochUnit),
    "date_rule": r.choice(DateRule),
    "kafka_timestamp_fallback": r.boolean,
    "min_date": r.calendar_date,
    "max_date": r.calendar_date,
}


@dataclass(frozen=True)
class StageRunSettings:
    """How due topics share stage runs (a fleet of small topics), under ``stage_runs:``."""

    max_topics_per_run: int = 50
    """At most this many topics in one stage run (one Spark job). ``1`` gives every topic a run
    of its own, as before fleets. Default 50."""
    max_messages_per_run: int = 5_000_000
    """A run takes topics until their backlogs together reach this many messages; a topic
    whose backlog alone reaches it gets a run of its own (a hot topic, staged in parallel
    ranges as ever). Each topic's ``staging.max_messages_per_run`` still caps what a run takes
    from each of its partitions. Default 5,000,000."""
    loop_standby: bool = True
    """Keep a warm standby behind every stage loop run (the topics writing ``delivery:
    storage_write`` tables): a second run with its SparkSession up, waiting, that takes over
    within a second or two when the loop run ends (its worker killed, ``max_run_s``, a deploy)
    instead of a cold start at the next sensor tick (20 s and more). It costs a run slot, a
    process and a Spark driver per loop run. Default true."""


STAGE_RUNS_SPEC: dict[str, r.Converter] = {
    "max_topics_per_run": r.integer(minimum=1),
    "max_messages_per_run": r.integer(minimum=1),
    "loop_standby": r.boolean,
}
