"""Run the MERGE of every keyed destination after loads, and remember what it merged.

What to merge comes from what is stored, not from memory. A changelog delivered by load jobs
(``delivery: load``): the succeeded load jobs of ``D.T_changelog`` carry their done files, whose
names give the exact offset ranges they loaded. A changelog delivered through the Storage Write
API (``delivery: storage_write``): the offsets after the merge's *delivered watermark* of each
partition, up to the end of its committed chain of done files (core/keyed/delivered.py). The
merge state (``_kbqe/merge_state.json`` in the staging area, written only by this step, which
runs in the BigQuery pool like the loads; merge_state.py) lists the jobs already merged and the
watermarks.
A crash anywhere is therefore harmless: the jobs and ranges not yet recorded are merged again by
the next run, and the MERGE is idempotent (merge_sql.py).

Per destination, a merge: reads the changelog's columns; creates ``D.T`` clustered by the
key, or by its ``tables:`` entry's ``clustering``, with that entry's labels and description
(and, for hard deletes, ``D.T_deleted_keys``), or adds the columns a newer row schema brought
and brings those options in step; runs the statements over the new jobs' offset ranges; replaces the history view
when ``history: true``; then records the jobs and watermarks. ``merge_every: N`` merges every
N-th cycle that has new jobs or newly delivered ranges, whether or not anything was loaded; a
forced merge (``kbqe run --until-idle``) merges whatever is new.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kbqe_dagster.core.config.pipeline import PipelineConfig, TopicConfig
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.keyed.checks import KeyedCheck, sample_for
from kbqe_dagster.core.keyed.contract import (
    CHANGE_COLUMNS,
    DeleteMode,
    SourceFormat,
    changelog_table,
    history_table,
)
from kbqe_dagster.core.keyed.delivered import (
    advanced,
    delivered_window,
    not_merged_yet,
    union,
)
from kbqe_dagster.core.load.state import LoadState
from kbqe_dagster.core.record.enrichment import EnrichmentConfig
from kbqe_dagster.core.record.partitioning import Delivery
from kbqe_dagster.core.record.table_options import (
    TableOptions,
    clustering_problems,
    table_update,
)
from kbqe_dagster.core.transforms.keyed_rows import key_columns
from kbqe_dagster.keyed.check_sql import check_sql
from kbqe_dagster.keyed.history_sql import history_sql
from kbqe_dagster.keyed.merge_sql import (
    DELETED_KEYS_SUFFIX,
    current_merges,
    merge_sql,
    recompute_count_sql,
)
from kbqe_dagster.keyed.merge_state import (
    MERGE_STATE_FILE,
    DeliveredView,
    MergeError,
    MergeState,
    changed_dates,
    delivered_view,
    not_merged_ranges,
    read_merge_state,
    unmerged_ranges,
)
from kbqe_dagster.keyed.rows_sql import MergeSpec, Ranges, placeholder_kind
from kbqe_dagster.resources.staging_store import StagingStore

if TYPE_CHECKING:  # the merger is handed the resource's interface; no import cost here
    from kbqe_dagster.resources.bigquery import GoogleBigQueryLoads

log = logging.getLogger(__name__)

MERGE_JOB = "merge_keyed_tables_job"
MERGE_OP = "merge_keyed_tables_op"
"""The names defs/keyed/jobs.py gives the job and its op, which ``kbqe run --until-idle``
runs after its loads (runner/keyed_merge.py); defined here, where both can import them."""


@dataclass(frozen=True)
class Destination:
    """One keyed destination ``dataset.table`` and the topic that feeds it."""

    topic: TopicConfig
    dataset: str
    table: str

    @property
    def name(self) -> str:
        return f"{self.dataset}.{self.table}"

    @property
    def changelog(self) -> str:
        return changelog_table(self.table)


def keyed_destinations(config: PipelineConfig) -> list[Destination]:
    out = []
    for topic in config.topics:
        static = topic.routing.static_destination
        if topic.keyed is not None and static is not None:
            out.append(Destination(topic, static.dataset, static.table))
    return out


def delivers_by_storage_write(config: PipelineConfig, dest: Destination, state: MergeState) -> bool:
    """Whether ``dest``'s changelog is delivered through the Storage Write API, or was: its
    watermarks then still tell what of its delivered rows is merged."""
    return (
        config.delivery(dest.dataset, dest.changelog, dest.topic.name) is Delivery.STORAGE_WRITE
        or dest.name in state.delivered
    )


def _delivered_view(store: StagingStore, dest: Destination, load_state: LoadState) -> DeliveredView:
    return delivered_view(store, dest.topic.name, dest.dataset, dest.changelog, load_state)


# --- one merge ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableMergeResult:
    table: str
    jobs: int
    keys_merged: int
    bytes_processed: int | None
    statements: int
    history: str | None = None
    keys_recomputed: int = 0
    """Keys whose row was recomputed from their whole history (events older than their row:
    late, or merged again); the others had the new events folded on top (merge_sql)."""
    delivered: Ranges = field(default_factory=dict)
    """The offset ranges of delivered (storage_write) changelog rows merged."""


class KeyedMerger:
    """Merges keyed destinations through the BigQuery resource's interface (Google or the
    emulator variant: resources/bigquery/), whose client runs the statements."""

    def __init__(
        self,
        loads: GoogleBigQueryLoads,
        *,
        key_fields: Callable[[str], tuple[str, ...]] | None = None,
        enrichment: EnrichmentConfig | None = None,
        table_options: Callable[[str, str], TableOptions] | None = None,
        partition_column: Callable[[str, str], str] | None = None,
    ) -> None:
        self.loads = loads
        self.client = loads.client
        self.project = loads.project
        self.key_fields = key_fields
        self.enrichment = enrichment or EnrichmentConfig()
        self.table_options = table_options or (lambda dataset, table: TableOptions())
        """The ``tables:`` options of a current table ``D.T`` (PipelineConfig.table_layout)."""
        self.partition_column = partition_column or (
            lambda dataset, table: self.enrichment.event_date_column
        )
        """The column a changelog is partitioned on (PipelineConfig.table_layout): every
        read of it filters there (rows_sql.MergeSpec.date_column)."""
        self._keys: dict[str, tuple[str, ...]] = {}

    def ref(self, dataset: str, table: str) -> str:
        return f"{self.project}.{dataset}.{table}"

    def spec(
        self,
        dest: Destination,
        columns: dict[str, Any] | None = None,
    ) -> tuple[MergeSpec, dict[str, Any]]:
        """The destination's merge spec from its changelog's current columns (read unless
        given; returned too, name → SchemaField)."""
        keyed = dest.topic.keyed
        assert keyed is not None
        columns = columns or self.columns(dest.dataset, dest.changelog)
        if columns is None:
            raise MergeError(
                f"{dest.name}: its changelog {dest.dataset}.{dest.changelog} does "
                "not exist (nothing was loaded into it yet)"
            )
        skip = {c.lower() for c in (*self.enrichment.columns, *CHANGE_COLUMNS)}
        row = tuple(name for name in columns if name.lower() not in skip)
        key = self.key_columns(dest)
        missing = [k for k in key if k not in row]
        if missing:
            raise MergeError(
                f"{dest.name}: key field(s) {missing} are not columns of "
                f"{dest.changelog} ({', '.join(row)})"
            )
        spec = MergeSpec(
            target=self.ref(dest.dataset, dest.table),
            changelog=self.ref(dest.dataset, dest.changelog),
            key=key,
            row_columns=row,
            deletes=keyed.deletes,
            partition_column=self.enrichment.partition_column,
            offset_column=self.enrichment.offset_column,
            deleted_keys=(
                self.ref(dest.dataset, dest.table + DELETED_KEYS_SUFFIX)
                if keyed.deletes is DeleteMode.HARD
                else None
            ),
            unavailable_value=keyed.placeholder(dest.topic.format),
            placeholders=tuple(
                (name, kind.value)
                for name in row
                if name not in key
                and (kind := placeholder_kind(columns[name].field_type, columns[name].mode))
            ),
            truncates=dest.topic.format is SourceFormat.DEBEZIUM,
            repeated=tuple(name for name in row if columns[name].mode == "REPEATED"),
            kafka_order=keyed.kafka_ordered,
            date_column=self.partition_column(dest.dataset, dest.changelog),
        )
        return spec, columns

    def merge(
        self,
        dest: Destination,
        ranges: Ranges,
        jobs: int,
        crash: Callable[[str], None] = lambda point: None,
        unmerged: Ranges | None = None,
        dates: tuple[str, ...] | None = None,
    ) -> TableMergeResult:
        """Apply ``ranges``; ``unmerged``: the ranges of the changelog rows that stay unmerged
        after this merge (other load jobs, pending or not merged yet), which the recomputed
        rows must not see (merge_sql.merge_sql); ``dates``: the event dates the rows of
        ``ranges`` lie in (None: not known), so that their reads prune to those partitions."""
        keyed = dest.topic.keyed
        assert keyed is not None
        spec, columns = self.spec(dest)
        if dates is not None and spec.date_column == self.enrichment.event_date_column:
            # Event dates name partitions only of a changelog partitioned by event date.
            spec = replace(spec, changed_dates=dates)
        key = spec.key
        self._ensure_table(
            dest.dataset,
            dest.table,
            spec.target_columns,
            columns,
            key,
            self.table_options(dest.dataset, dest.table),
        )
        if spec.deleted_keys:
            self._ensure_table(
                dest.dataset,
                dest.table + DELETED_KEYS_SUFFIX,
                (*key, *spec.order_columns),
                columns,
                key,
            )
        affected, billed, statements, recomputed = 0, None, 0, 0

        def billed_by(job: Any) -> int | None:
            if job.total_bytes_processed is None or not self.loads.reports_bytes_processed:
                return billed
            return (billed or 0) + int(job.total_bytes_processed)

        if ranges:
            # Whether any key must be recomputed from its whole history (merge_sql.merge_sql):
            # a question that reads the new rows and the table, so that a merge of new events
            # in order never reads the changelog outside its ranges.
            job = self.client.query(recompute_count_sql(spec, ranges, unmerged), job_retry=None)
            recomputed = int(next(iter(job.result()))["keys"])
            recompute = recomputed > 0
            billed = billed_by(job)
            for index, sql in enumerate(merge_sql(spec, ranges, unmerged, recompute)):
                job = self.client.query(sql, job_retry=None)
                job.result()
                statements += 1
                if index < current_merges(recompute):
                    affected += int(job.num_dml_affected_rows or 0)
                billed = billed_by(job)
                crash(f"merge_statement_{index}")
        view = None
        if keyed.history:
            view = self.ref(dest.dataset, history_table(dest.table))
            self.client.query(history_sql(spec, view), job_retry=None).result()
        return TableMergeResult(
            dest.name, jobs, affected, billed, statements, view, keys_recomputed=recomputed
        )

    def check(
        self, dest: Destination, unmerged: Ranges, sample_seed: str | None = None
    ) -> KeyedCheck:
        """Compare ``D.T`` with its recomputation from the changelog (check_sql.check_sql);
        nothing to compare before the first load and merge."""
        deletes = dest.topic.keyed.deletes
        columns = self.columns(dest.dataset, dest.changelog)
        if columns is None or not self.loads.table_exists(dest.dataset, dest.table):
            return KeyedCheck(dest.name, 0, 0, 0, 0, 0, deletes)
        spec, _ = self.spec(dest, columns)
        sample = (
            None
            if sample_seed is None
            else sample_for(self.loads.table_row_count(dest.dataset, dest.changelog), sample_seed)
        )
        job = self.client.query(check_sql(spec, unmerged, sample), job_retry=None)
        [row] = list(job.result())
        return KeyedCheck(
            dest.name,
            int(row["rows"]),
            int(row["duplicate_keys"]),
            int(row["extra"]),
            int(row["missing"]),
            int(row["deleted_rows"]),
            deletes,
            sample,
        )

    def columns(self, dataset: str, table: str) -> dict[str, Any] | None:
        """Column name → SchemaField, in table order; None when the table does not exist."""
        found = self.loads.table_schema(dataset, table)
        return None if found is None else {f.name: f for f in found[0]}

    def _ensure_table(
        self,
        dataset: str,
        table: str,
        wanted: Iterable[str],
        source: dict[str, Any],
        key: tuple[str, ...],
        options: TableOptions | None = None,
    ) -> None:
        """``dataset.table`` exists with every ``wanted`` column. Created clustered by the key
        (BigQuery clusters on up to 4 columns), or by ``options.clustering`` (a current
        table's ``tables:`` entry), with its labels and description; an existing current
        table's options are brought in step (the load path does the same for its tables)."""
        from google.cloud import bigquery

        options = options or TableOptions()
        wanted = list(wanted)
        clustering = key[:4] if options.clustering is None else options.clustering
        existing = self.columns(dataset, table)
        if existing is None:
            columns = {c: (source[c].field_type, source[c].mode or "NULLABLE") for c in wanted}
            problems = clustering_problems(clustering, columns, f"{dataset}.{table}")
            if problems:
                raise MergeError("; ".join(problems) + f" (tables.{dataset}.{table}.clustering)")
            created = bigquery.Table(
                self.ref(dataset, table), schema=[_nullable(source[c]) for c in wanted]
            )
            created.clustering_fields = list(clustering) or None
            created.labels = dict(options.labels)
            created.description = options.description
            self.client.create_table(created, exists_ok=True)
            log.info("%s.%s: created, clustered by %s", dataset, table, ", ".join(clustering))
            return
        if options != TableOptions():  # one more metadata read only for tables that ask
            current = self.loads.table_metadata(dataset, table)
            update = table_update(current, options) if current else None
            if update:
                self.loads.update_table_options(dataset, table, update)
                log.info("%s.%s: updated %s", dataset, table, "; ".join(update.changes))
        known = {c.lower() for c in existing}
        for name in wanted:
            if name.lower() not in known:
                self.client.query(
                    f"ALTER TABLE `{self.ref(dataset, table)}` ADD COLUMN `{name}` "
                    f"{_sql_type(source[name])}",
                    job_retry=None,
                ).result()
                log.info("%s.%s: added column %s (a newer row schema)", dataset, table, name)

    def key_columns(self, dest: Destination) -> tuple[str, ...]:
        """The key's columns in the changelog: ``keyed.key`` (else the Kafka key's fields)
        after the topic's transforms, a renamed key field under its new name. A transform
        that does not keep the key's identity is a ConfigError naming it
        (core/transforms/keyed_rows.py): checked when the file is read for a configured key,
        here for the Kafka key's."""
        topic = dest.topic
        assert topic.keyed is not None
        key = topic.keyed.key or self._key_of(dest)
        if not topic.transforms:
            return key
        where = f"topics[{topic.name}].transforms"
        try:
            return key_columns(topic.transforms, key, where)
        except ValueError as error:
            raise ConfigError(f"{dest.name}: key {list(key)}: {error}") from None

    def _key_of(self, dest: Destination) -> tuple[str, ...]:
        """The Kafka key's fields, asked of the registry once per topic and merger."""
        topic = dest.topic.name
        if topic not in self._keys:
            if self.key_fields is None:
                raise ConfigError(
                    f"topics[{topic}].keyed.key: not set, and no schema "
                    "registry to read the Kafka key's schema from"
                )
            self._keys[topic] = self.key_fields(topic)
        return self._keys[topic]


def _nullable(column: Any) -> Any:
    """A changelog column as a column of a merged table: every column nullable (a row may
    predate a field), repeated fields kept repeated."""
    if column.mode == "REQUIRED":
        return column.__class__(
            column.name,
            column.field_type,
            mode="NULLABLE",
            fields=column.fields,
            description=column.description,
        )
    return column


def _sql_type(column: Any) -> str:
    kind = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL"}.get(
        column.field_type, column.field_type
    )
    if kind in ("RECORD", "STRUCT"):
        kind = "STRUCT<" + ", ".join(f"`{f.name}` {_sql_type(f)}" for f in column.fields) + ">"
    return f"ARRAY<{kind}>" if column.mode == "REPEATED" else kind


def _history_missing(loads: GoogleBigQueryLoads, dest: Destination) -> bool:
    return loads.table_exists(dest.dataset, dest.changelog) and not loads.table_exists(
        dest.dataset, history_table(dest.table)
    )


# --- all destinations -------------------------------------------------------------------------
def merge_keyed_tables(
    config: PipelineConfig,
    merger: KeyedMerger,
    store: StagingStore,
    load_state: LoadState,
    *,
    force: bool = False,
    crash: Callable[[str], None] = lambda point: None,
) -> list[TableMergeResult]:
    """Merge every keyed destination that has new load jobs or newly delivered rows and is due
    (``merge_every``, or ``force``); the merge state is saved after each destination."""
    state = read_merge_state(store)
    results = []
    for dest in keyed_destinations(config):
        merged = state.merged_jobs.setdefault(dest.name, set())
        jobs, ranges = unmerged_ranges(load_state, merged, dest.dataset, dest.changelog)
        view, window = None, {}
        if delivers_by_storage_write(config, dest, state):
            view = _delivered_view(store, dest, load_state)
            window = delivered_window(
                state.delivered.get(dest.name, {}), view.committed, view.owned
            )
        if window and not jobs and merger.columns(dest.dataset, dest.changelog) is None:
            # Ranges committed without a changelog row (tombstones, dead letters only): listed
            # before this check, so any row of theirs would have created the table first.
            state.delivered[dest.name] = advanced(
                state.delivered.get(dest.name, {}), view.committed
            )
            store.put_bytes(MERGE_STATE_FILE, state.encode())
            window = {}
        if not jobs and not window:
            # No new rows, but the view may be missing (e.g. history was just enabled).
            if dest.topic.keyed.history and _history_missing(merger.loads, dest):
                results.append(merger.merge(dest, {}, 0))
            continue
        cycles = state.cycles.get(dest.name, 0) + 1
        if not force and cycles < dest.topic.keyed.merge_every:
            state.cycles[dest.name] = cycles
            store.put_bytes(MERGE_STATE_FILE, state.encode())
            continue
        # What stays unmerged after this merge: as check_keyed_tables will see it.
        unmerged = not_merged_ranges(load_state, merged | set(jobs), dest.dataset, dest.changelog)
        if view is not None:
            unmerged = union(
                unmerged,
                not_merged_yet(
                    advanced(state.delivered.get(dest.name, {}), view.committed),
                    view.committed,
                    view.owned,
                ),
            )
        # Delivered rows' dates are not looked up: with a window, every partition is read.
        dates = None if window else changed_dates(store, load_state, jobs)
        result = replace(
            merger.merge(
                dest, union(ranges, window), len(jobs), crash, unmerged=unmerged, dates=dates
            ),
            delivered=window,
        )
        crash("merge_before_state")
        # Forget job ids the load state no longer holds: they cannot come back.
        held = {j.job_id for j in load_state.jobs}
        state.merged_jobs[dest.name] = {j for j in merged | set(jobs) if j in held}
        if view is not None:
            state.delivered[dest.name] = advanced(
                state.delivered.get(dest.name, {}), view.committed
            )
        state.cycles[dest.name] = 0
        store.put_bytes(MERGE_STATE_FILE, state.encode())
        log.info(
            "%s: merged %d load job(s)%s (new rows read in %s), %d key(s) changed%s%s",
            dest.name,
            len(jobs),
            f" and delivered rows {_spans(window)}" if window else "",
            "every partition" if dates is None else f"{len(dates)} day partition(s)",
            result.keys_merged,
            f" ({result.keys_recomputed:,} recomputed from their history: events older than "
            "their row)"
            if result.keys_recomputed
            else "",
            f", {result.bytes_processed:,} bytes processed" if result.bytes_processed else "",
        )
        results.append(result)
    return results


def check_keyed_tables(
    config: PipelineConfig,
    merger: KeyedMerger,
    store: StagingStore,
    load_state: LoadState,
    seed: str,
    tables: Iterable[str] | None = None,
) -> list[KeyedCheck]:
    """Measure every keyed current table (or those named ``dataset.table``) against the
    changelog rows its merges have applied."""
    state = read_merge_state(store)
    wanted = set(tables) if tables is not None else None
    out = []
    for dest in keyed_destinations(config):
        if wanted is not None and dest.name not in wanted:
            continue
        merged = state.merged_jobs.get(dest.name, set())
        unmerged = not_merged_ranges(load_state, merged, dest.dataset, dest.changelog)
        if delivers_by_storage_write(config, dest, state):
            view = _delivered_view(store, dest, load_state)
            unmerged = union(
                unmerged,
                not_merged_yet(state.delivered.get(dest.name, {}), view.committed, view.owned),
            )
        out.append(merger.check(dest, unmerged, seed))
    return out


def _spans(ranges: Ranges) -> str:
    return ", ".join(f"[{p}] {a}..{b}" for p, spans in sorted(ranges.items()) for a, b in spans)
