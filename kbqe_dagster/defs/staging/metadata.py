"""What a stage run reports on the ``staging`` asset's materialization: per topic
(:func:`stage_metadata`), one topic's plain totals (:func:`topic_totals`, which the metrics fold:
observability/event_totals.py) and a run of one topic or a group (:func:`group_metadata`, what
``kbqe run --until-idle`` reports per topic). The stage runs and the stage loop runs both report
through it.
"""

from collections import Counter
from collections.abc import Iterable

import dagster as dg

from kbqe_dagster.core.load.cost import storage_write_list_price
from kbqe_dagster.core.stage_runs import report_keys as stage_report
from kbqe_dagster.staging.job import StageSummary


def stage_metadata(summary: StageSummary) -> dict:
    prep = summary.preparation
    return {
        stage_report.TOPIC: summary.topic,
        stage_report.ROWS: summary.records,
        stage_report.MESSAGES: summary.messages,
        stage_report.BYTES_WRITTEN: summary.bytes_written,
        stage_report.BYTES_WRITTEN_BY_DATASET: dg.MetadataValue.json(_bytes_by_dataset(summary)),
        stage_report.STORAGE_WRITE_BY_TABLE: dg.MetadataValue.json(appended_by_table([summary])),
        stage_report.FILES_WRITTEN: len(summary.files),
        stage_report.RANGES: dg.MetadataValue.json(list(summary.committed_ranges)),
        stage_report.DEAD_LETTERS: sum(summary.dead_letters.values()),
        stage_report.DEAD_LETTERS_BY_REASON: dg.MetadataValue.json(summary.dead_letters),
        stage_report.SKIPPED_BY_REASON: dg.MetadataValue.json(summary.skipped),
        # Keyed topics count null values (Debezium's tombstones) instead of dead-lettering them.
        **({stage_report.TOMBSTONES: summary.tombstones} if summary.tombstones else {}),
        # The native kernel or the Python path (staging/native_kernel.py), and what the kernel
        # handed back to the Python path.
        stage_report.STAGE_PATH: summary.stage_path,
        stage_report.KAFKA_READER: summary.reader,
        **(
            {stage_report.KERNEL_HANDBACKS: dg.MetadataValue.json(summary.kernel_handbacks)}
            if summary.kernel_handbacks
            else {}
        ),
        stage_report.ORPHANS_DELETED: len(prep.orphans_deleted),
        stage_report.ROLLED_FORWARD: len(prep.rolled_forward),
        stage_report.UNRECOGNIZED_FILES: len(prep.unrecognized),
        stage_report.LOST_OFFSETS: sum(p.lost_messages for p in prep.plan.partitions),
        stage_report.SECONDS: round(summary.seconds, 3),
    }


def topic_totals(summary: StageSummary) -> dict:
    """One topic's share of a run, plain values under :func:`stage_metadata`'s key names (the
    metrics fold a grouped run's topics one by one: observability/event_totals.py)."""
    return {
        stage_report.ROWS: summary.records,
        stage_report.MESSAGES: summary.messages,
        stage_report.BYTES_WRITTEN: summary.bytes_written,
        stage_report.BYTES_WRITTEN_BY_DATASET: _bytes_by_dataset(summary),
        stage_report.STORAGE_WRITE_BY_TABLE: appended_by_table([summary]),
        stage_report.FILES_WRITTEN: len(summary.files),
        stage_report.RANGES: list(summary.committed_ranges),
        stage_report.DEAD_LETTERS: sum(summary.dead_letters.values()),
        stage_report.DEAD_LETTERS_BY_REASON: summary.dead_letters,
        stage_report.SKIPPED_BY_REASON: summary.skipped,
        # Keyed topics count null values; append topics dead-letter or skip them (as above).
        **({stage_report.TOMBSTONES: summary.tombstones} if summary.tombstones else {}),
        # Which path staged this topic, and what the kernel handed back, in a grouped run too.
        stage_report.STAGE_PATH: summary.stage_path,
        stage_report.KAFKA_READER: summary.reader,
        **(
            {stage_report.KERNEL_HANDBACKS: summary.kernel_handbacks}
            if summary.kernel_handbacks
            else {}
        ),
        stage_report.ORPHANS_DELETED: len(summary.preparation.orphans_deleted),
        stage_report.SECONDS: round(summary.seconds, 3),
    }


def group_metadata(names: tuple[str, ...], summaries: tuple[StageSummary, ...]) -> dict:
    """A single topic's :func:`stage_metadata` as ever; for a group the same keys summed over
    its topics, plus ``topics`` and ``by_topic`` (what ``kbqe run --until-idle`` reports per
    topic)."""
    by_topic = dg.MetadataValue.json({s.topic: topic_totals(s) for s in summaries})
    if len(names) == 1 and len(summaries) == 1:
        return {
            **stage_metadata(summaries[0]),
            stage_report.TOPICS: dg.MetadataValue.json(list(names)),
            stage_report.BY_TOPIC: by_topic,
        }
    dead: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    written: Counter[str] = Counter()
    handbacks: Counter[str] = Counter()
    for s in summaries:
        dead.update(s.dead_letters)
        skipped.update(s.skipped)
        written.update(_bytes_by_dataset(s))
        handbacks.update(s.kernel_handbacks)
    tombstones = sum(s.tombstones for s in summaries)
    return {
        stage_report.TOPICS: dg.MetadataValue.json(list(names)),
        stage_report.ROWS: sum(s.records for s in summaries),
        stage_report.MESSAGES: sum(s.messages for s in summaries),
        stage_report.BYTES_WRITTEN: sum(s.bytes_written for s in summaries),
        stage_report.BYTES_WRITTEN_BY_DATASET: dg.MetadataValue.json(dict(written)),
        stage_report.STORAGE_WRITE_BY_TABLE: dg.MetadataValue.json(appended_by_table(summaries)),
        stage_report.FILES_WRITTEN: sum(len(s.files) for s in summaries),
        stage_report.RANGES: dg.MetadataValue.json(
            [r for s in summaries for r in s.committed_ranges]
        ),
        stage_report.DEAD_LETTERS: sum(dead.values()),
        stage_report.DEAD_LETTERS_BY_REASON: dg.MetadataValue.json(dict(dead)),
        stage_report.SKIPPED_BY_REASON: dg.MetadataValue.json(dict(skipped)),
        **({stage_report.TOMBSTONES: tombstones} if tombstones else {}),
        stage_report.STAGE_PATH: _joined(s.stage_path for s in summaries),
        stage_report.KAFKA_READER: _joined(s.reader for s in summaries),
        **(
            {stage_report.KERNEL_HANDBACKS: dg.MetadataValue.json(dict(handbacks))}
            if handbacks
            else {}
        ),
        stage_report.ORPHANS_DELETED: sum(len(s.preparation.orphans_deleted) for s in summaries),
        stage_report.ROLLED_FORWARD: sum(len(s.preparation.rolled_forward) for s in summaries),
        stage_report.UNRECOGNIZED_FILES: sum(len(s.preparation.unrecognized) for s in summaries),
        stage_report.LOST_OFFSETS: sum(
            p.lost_messages for s in summaries for p in s.preparation.plan.partitions
        ),
        stage_report.SECONDS: round(max((s.seconds for s in summaries), default=0.0), 3),
        stage_report.BY_TOPIC: by_topic,
    }


def _joined(names: Iterable[str]) -> str:
    """The ``+``-joined names of several summaries' paths or readers (``native+python``)."""
    return (
        "+".join(sorted({p for n in names for p in n.split("+") if p != "none"}, reverse=True))
        or "none"
    )


def _bytes_by_dataset(summary: StageSummary) -> dict[str, int]:
    """Avro bytes written per destination dataset (the exporter's ``kbqe_bytes_written``)."""
    total: Counter[str] = Counter()
    for result in summary.results:
        total.update(result.bytes_by_dataset)
    return dict(total)


def appended_by_table(summaries: Iterable[StageSummary]) -> dict[str, dict]:
    """Per ``dataset.table`` delivered through the Storage Write API by these stage summaries'
    committed ranges: rows and bytes appended, and their list price in USD before the free
    tier (core/load/cost.py); empty for a run of load tables only."""
    rows: Counter[str] = Counter()
    appended: Counter[str] = Counter()
    for summary in summaries:
        for result in summary.results:
            if result.committed_last is None:
                continue
            for d in result.delivered:
                rows[f"{d.dataset}.{d.table}"] += d.rows
                appended[f"{d.dataset}.{d.table}"] += d.bytes
    return {
        table: {
            "rows": rows[table],
            "bytes": appended[table],
            "list_price_usd": round(storage_write_list_price(appended[table]), 6),
        }
        for table in sorted(appended)
    }
