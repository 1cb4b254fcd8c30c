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
from kbqe_dagster.staging.job import StageSummary


def stage_metadata(summary: StageSummary) -> dict:
    prep = summary.preparation
    return {
        "topic": summary.topic,
        "dagster/row_count": summary.records,
        "messages": summary.messages,
        "bytes_written": summary.bytes_written,
        "bytes_written_by_dataset": dg.MetadataValue.json(_bytes_by_dataset(summary)),
        "storage_write_by_table": dg.MetadataValue.json(appended_by_table([summary])),
        "files_written": len(summary.files),
        "ranges": dg.MetadataValue.json(list(summary.committed_ranges)),
        "dead_letters": sum(summary.dead_letters.values()),
        "dead_letters_by_reason": dg.MetadataValue.json(summary.dead_letters),
        "skipped_by_reason": dg.MetadataValue.json(summary.skipped),
        # Keyed topics count null values (Debezium's tombstones) instead of dead-lettering them.
        **({"tombstones": summary.tombstones} if summary.tombstones else {}),
        # The native kernel or the Python path (staging/native_kernel.py), and what the kernel
        # handed back to the Python path.
        "stage_path": summary.stage_path,
        "kafka_reader": summary.reader,
        **(
            {"kernel_handbacks": dg.MetadataValue.json(summary.kernel_handbacks)}
            if summary.kernel_handbacks
            else {}
        ),
        "orphans_deleted": len(prep.orphans_deleted),
        "rolled_forward": len(prep.rolled_forward),
        "unrecognized_files": len(prep.unrecognized),
        "lost_offsets": sum(p.lost_messages for p in prep.plan.partitions),
        "seconds": round(summary.seconds, 3),
    }


def topic_totals(summary: StageSummary) -> dict:
    """One topic's share of a run, plain values under :func:`stage_metadata`'s key names (the
    metrics fold a grouped run's topics one by one: observability/event_totals.py)."""
    return {
        "dagster/row_count": summary.records,
        "messages": summary.messages,
        "bytes_written": summary.bytes_written,
        "bytes_written_by_dataset": _bytes_by_dataset(summary),
        "storage_write_by_table": appended_by_table([summary]),
        "files_written": len(summary.files),
        "ranges": list(summary.committed_ranges),
        "dead_letters": sum(summary.dead_letters.values()),
        "dead_letters_by_reason": summary.dead_letters,
        "skipped_by_reason": summary.skipped,
        # Keyed topics count null values; append topics dead-letter or skip them (as above).
        **({"tombstones": summary.tombstones} if summary.tombstones else {}),
        "orphans_deleted": len(summary.preparation.orphans_deleted),
        "seconds": round(summary.seconds, 3),
    }


def group_metadata(names: tuple[str, ...], summaries: tuple[StageSummary, ...]) -> dict:
    """A single topic's :func:`stage_metadata` as ever; for a group the same keys summed over
    its topics, plus ``topics`` and ``by_topic`` (what ``kbqe run --until-idle`` reports per
    topic)."""
    by_topic = dg.MetadataValue.json({s.topic: topic_totals(s) for s in summaries})
    if len(names) == 1 and len(summaries) == 1:
        return {
            **stage_metadata(summaries[0]),
            "topics": dg.MetadataValue.json(list(names)),
            "by_topic": by_topic,
        }
    dead: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    written: Counter[str] = Counter()
    for s in summaries:
        dead.update(s.dead_letters)
        skipped.update(s.skipped)
        written.update(_bytes_by_dataset(s))
    tombstones = sum(s.tombstones for s in summaries)
    return {
        "topics": dg.MetadataValue.json(list(names)),
        "dagster/row_count": sum(s.records for s in summaries),
        "messages": sum(s.messages for s in summaries),
        "bytes_written": sum(s.bytes_written for s in summaries),
        "bytes_written_by_dataset": dg.MetadataValue.json(dict(written)),
        "storage_write_by_table": dg.MetadataValue.json(appended_by_table(summaries)),
        "files_written": sum(len(s.files) for s in summaries),
        "ranges": dg.MetadataValue.json([r for s in summaries for r in s.committed_ranges]),
        "dead_letters": sum(dead.values()),
        "dead_letters_by_reason": dg.MetadataValue.json(dict(dead)),
        "skipped_by_reason": dg.MetadataValue.json(dict(skipped)),
        **({"tombstones": tombstones} if tombstones else {}),
        "stage_path": "+".join(
            sorted(
                {p for s in summaries for p in s.stage_path.split("+") if p != "none"}, reverse=True
            )
        )
        or "none",
        "orphans_deleted": sum(len(s.preparation.orphans_deleted) for s in summaries),
        "rolled_forward": sum(len(s.preparation.rolled_forward) for s in summaries),
        "unrecognized_files": sum(len(s.preparation.unrecognized) for s in summaries),
        "lost_offsets": sum(
            p.lost_messages for s in summaries for p in s.preparation.plan.partitions
        ),
        "seconds": round(max((s.seconds for s in summaries), default=0.0), 3),
        "by_topic": by_topic,
    }


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
