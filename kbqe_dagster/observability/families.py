"""The metric families: names, help texts and labels, built from the sources' readings.

Every name, label and meaning here is listed in ``docs/operations.md`` ("Metrics and
health"); change both together. Counters are totals over the durable history (event log,
load state file), recomputed at each scrape; gauges are the state at the last refresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from kbqe_dagster.core.load.cost import STORAGE_WRITE_USD_PER_GIB
from kbqe_dagster.core.load.state import JobStatus, LoadState
from kbqe_dagster.observability.event_totals import EventTotals, Histogram
from kbqe_dagster.observability.lag import LagView
from kbqe_dagster.observability.load_counts import jobs_by_status, load_counts
from kbqe_dagster.observability.staging_view import StagingView

TABLE = ["dataset", "table"]


def _counter(name: str, doc: str, labels: list[str], rows: Iterable[tuple]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=labels)
    for *values, value in rows:
        family.add_metric([str(v) for v in values], value)
    return family


def _gauge(name: str, doc: str, labels: list[str], rows: Iterable[tuple]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for *values, value in rows:
        family.add_metric([str(v) for v in values], value)
    return family


# --- stage runs (event log) ------------------------------------------------------------------
def stage_families(totals: EventTotals) -> Iterator[Metric]:
    topics = sorted(totals.topics.items())
    yield _counter(
        "kbqe_stage_runs",
        "Stage runs that committed, per topic.",
        ["topic"],
        ((t, v.runs) for t, v in topics),
    )
    yield _counter(
        "kbqe_messages_consumed",
        "Kafka messages read by stage runs.",
        ["topic"],
        ((t, v.messages) for t, v in topics),
    )
    yield _counter(
        "kbqe_records_staged",
        "Records staged into avro files (dead letters excluded).",
        ["topic"],
        ((t, v.records) for t, v in topics),
    )
    yield _counter(
        "kbqe_avro_files_written",
        "Avro files opened, closed and committed (dead-letter files included).",
        ["topic"],
        ((t, v.files_written) for t, v in topics),
    )
    yield _counter(
        "kbqe_orphan_avro_files_deleted",
        "Avro files without a done file deleted before staging (crash leftovers).",
        ["topic"],
        ((t, v.orphans_deleted) for t, v in topics),
    )
    yield _counter(
        "kbqe_bytes_written",
        "Avro bytes written to the staging area (compressed file sizes), per destination dataset.",
        ["topic", "dataset"],
        ((t, d, n) for (t, d), n in sorted(totals.bytes_by_dataset.items())),
    )
    yield _counter(
        "kbqe_dead_letters",
        "Messages written to dead-letter files, per reason.",
        ["topic", "reason"],
        ((t, r, n) for t, v in topics for r, n in sorted(v.dead_letters.items())),
    )
    yield _counter(
        "kbqe_tombstones",
        "Null values of keyed topics (Debezium writes one after "
        "each delete): counted, neither staged nor dead-lettered.",
        ["topic"],
        ((t, v.tombstones) for t, v in topics),
    )
    yield _counter(
        "kbqe_skipped_messages",
        "Bad messages skipped (policy skip), per reason.",
        ["topic", "reason"],
        ((t, r, n) for t, v in topics for r, n in sorted(v.skipped.items())),
    )
    seconds = HistogramMetricFamily(
        "kbqe_stage_run_seconds",
        "Duration of a stage run, from planning to the last commit.",
        labels=["topic"],
    )
    batch = HistogramMetricFamily(
        "kbqe_stage_batch_messages",
        "Messages read by one stage run (the batch size).",
        labels=["topic"],
    )
    for topic, t in topics:
        seconds.add_metric([topic], _buckets(t.run_seconds), t.run_seconds.total)
        batch.add_metric([topic], _buckets(t.batch_messages), t.batch_messages.total)
    yield seconds
    yield batch
    yield _counter(
        "kbqe_staging_done_files_deleted",
        "Done files deleted by retention.",
        [],
        [(totals.done_files_deleted,)],
    )
    yield _counter(
        "kbqe_staging_leftovers_deleted",
        "Avro objects under a committed name that "
        "were not the version the commit pinned (a late writer's re-upload): "
        "deleted by the load step, never loaded.",
        [],
        [(totals.leftovers_deleted,)],
    )


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    return [(floatToGoString(le), float(n)) for le, n in histogram.cumulative()]


# --- load jobs (event log + load state file) ----------------------------------------------
def load_families(totals: EventTotals, state: LoadState) -> Iterator[Metric]:
    counts = sorted(load_counts(totals, state).items())
    yield _counter(
        "kbqe_load_jobs_submitted",
        "Load job attempts submitted to BigQuery.",
        TABLE,
        ((d, t, c.submitted) for (d, t), c in counts),
    )
    yield _counter(
        "kbqe_load_jobs_failed",
        "Load job attempts that failed (retried under a new id, or quarantined).",
        TABLE,
        ((d, t, c.failed) for (d, t), c in counts),
    )
    yield _counter(
        "kbqe_load_jobs_succeeded",
        "Load jobs that succeeded.",
        TABLE,
        ((d, t, c.succeeded) for (d, t), c in counts),
    )
    yield _counter(
        "kbqe_staging_avro_files_deleted",
        "Avro files deleted from the staging area after their load job succeeded.",
        TABLE,
        ((d, t, c.files_deleted) for (d, t), c in counts),
    )
    yield _counter(
        "kbqe_load_rows",
        "Rows loaded, from the load jobs' statistics.",
        TABLE,
        ((d, t, c.rows) for (d, t), c in counts),
    )
    yield _counter(
        "kbqe_load_bytes",
        "Input bytes of succeeded load jobs (avro files loaded; batch loads are free).",
        TABLE,
        ((d, t, v.bytes) for (d, t), v in sorted(totals.tables.items())),
    )


# --- Storage Write API (event log) ------------------------------------------------------------
def storage_write_families(totals: EventTotals) -> Iterator[Metric]:
    appends = sorted(totals.appends.items())
    yield _counter(
        "kbqe_storage_write_rows",
        "Rows appended through the BigQuery Storage Write "
        "API by committed ranges (delivery: storage_write).",
        TABLE,
        ((d, t, v.rows) for (d, t), v in appends),
    )
    yield _counter(
        "kbqe_storage_write_bytes",
        "Serialized row bytes appended through the "
        "BigQuery Storage Write API by committed ranges: what the API bills "
        f"(list ${STORAGE_WRITE_USD_PER_GIB} per GiB after a monthly free tier).",
        TABLE,
        ((d, t, v.bytes) for (d, t), v in appends),
    )


def load_state_families(state: LoadState) -> Iterator[Metric]:
    by_status = jobs_by_status(state)
    yield _gauge(
        "kbqe_load_jobs",
        "Load jobs in the load state file, per status.",
        [*TABLE, "status"],
        ((d, t, s, n) for (d, t, s), n in sorted(by_status.items())),
    )
    running = sorted(
        (d, t, n) for (d, t, s), n in by_status.items() if s == JobStatus.SUBMITTED.value
    )
    yield _gauge(
        "kbqe_load_jobs_running",
        "Load jobs submitted to BigQuery and not finished.",
        TABLE,
        running,
    )


# --- staging area (listing + load state file) ------------------------------------------------
def staging_families(view: StagingView) -> Iterator[Metric]:
    yield _gauge(
        "kbqe_staging_files",
        "Files in the staging area, by kind (avro: committed or not; done: markers included).",
        ["kind"],
        [
            ("avro", view.avro_files),
            ("done", view.done_files),
            ("unrecognized", view.unrecognized_files),
        ],
    )
    yield _gauge(
        "kbqe_staging_uncommitted_avro_files",
        "Avro files without their done file "
        "(a stage run in flight, or leftovers the next run deletes).",
        [],
        [(view.uncommitted_files,)],
    )
    groups = [((p.dataset, p.table, p.state.value), p) for p in view.pending]
    labels = [*TABLE, "state"]
    yield _gauge(
        "kbqe_staging_pending_files",
        "Committed avro files not loaded yet.",
        labels,
        ((*k, p.files) for k, p in groups),
    )
    yield _gauge(
        "kbqe_staging_pending_bytes",
        "Bytes of committed avro files not loaded yet.",
        labels,
        ((*k, p.bytes) for k, p in groups),
    )
    yield _gauge(
        "kbqe_staging_oldest_pending_age_seconds",
        "Age of the oldest committed avro file not loaded yet.",
        labels,
        ((*k, p.oldest_age_s) for k, p in groups),
    )
    yield _gauge(
        "kbqe_staging_quarantined_tables",
        "Tables with quarantined files.",
        [],
        [(len(view.quarantined_tables),)],
    )


# --- Kafka lag (watermarks + done files) ------------------------------------------------------
def lag_families(lag: LagView) -> Iterator[Metric]:
    parts = [(b.topic, p) for b in lag.topics for p in b.partitions]
    yield _gauge(
        "kbqe_kafka_lag_messages",
        "Offsets in Kafka beyond the committed done files.",
        ["topic", "partition"],
        ((t, p.partition, p.lag) for t, p in parts),
    )
    yield _gauge(
        "kbqe_kafka_high_watermark",
        "Kafka's high watermark (next offset produced).",
        ["topic", "partition"],
        ((t, p.partition, p.high) for t, p in parts),
    )
    yield _gauge(
        "kbqe_staging_next_offset",
        "The offset the next stage run starts from.",
        ["topic", "partition"],
        ((t, p.partition, p.next_offset) for t, p in parts),
    )
    readable = [(b.topic, 1) for b in lag.topics] + [(t, 0) for t in sorted(lag.unreadable)]
    yield _gauge(
        "kbqe_kafka_topic_readable",
        "1 when the topic's watermarks could be read.",
        ["topic"],
        sorted(readable),
    )
