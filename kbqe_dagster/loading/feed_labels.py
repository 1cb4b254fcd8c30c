"""The load side of "one staging area per (table, topic)" (core/load/feeds.py): before a job
is submitted, its table's labels are read and a topic fed by another staging area refuses it;
after it succeeded, the table is labelled with this staging area for its new topics. Both are
table metadata reads and writes: free."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kbqe_dagster.core.errors import StagingAreaConflictError
from kbqe_dagster.core.load.feeds import feed_conflicts, labels_to_add
from kbqe_dagster.core.load.state import LoadJobRecord
from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster.resources.bigquery import BigQueryLoads

log = logging.getLogger(__name__)


def job_topics(files: Iterable[str]) -> set[str]:
    """The topics whose records the avro ``files`` hold (a dead-letter file: the topic its bad
    messages came from)."""
    names = (parse_name(f) for f in files)
    return {n.key.topic for n in names if isinstance(n, AvroFileName)}


def check_feeds(bigquery: BigQueryLoads, staging_url: str, job: LoadJobRecord) -> None:
    """Raises :class:`StagingAreaConflictError` when another staging area feeds ``job``'s table
    with one of its topics. Raised before the submission, so the coordinator fails the job,
    retries it, then quarantines its files with the message in the note."""
    dataset, table = job.table_id
    conflicts = feed_conflicts(
        bigquery.table_labels(dataset, table),
        f"{dataset}.{table}",
        job_topics(job.files),
        staging_url,
    )
    if conflicts:
        raise StagingAreaConflictError("; ".join(c.message for c in conflicts))


def record_feeds(bigquery: BigQueryLoads, staging_url: str, job: LoadJobRecord) -> None:
    """Labels ``job``'s table with this staging area for each of its topics without a label.
    Called after the load succeeded, so a failure here only postpones the label to the
    table's next load: it is logged, never fails the cycle."""
    dataset, table = job.table_id
    topics = job_topics(job.files)
    try:
        labels = bigquery.table_labels(dataset, table)
        add, unguarded = labels_to_add(labels, topics, staging_url)
        if labels is not None and add:
            bigquery.add_table_labels(dataset, table, add)
    except Exception as error:  # noqa: BLE001 - reported; the load itself is done
        log.warning(
            "%s.%s: could not label it as fed with %s by %s (the table's next load tries "
            "again): %s",
            dataset,
            table,
            ", ".join(sorted(topics)),
            staging_url,
            error,
        )
        return
    if unguarded:
        log.warning(
            "%s.%s carries BigQuery's maximum of 64 labels: topic(s) %s not recorded as fed by "
            "%s, so a second staging area loading them would not be refused",
            dataset,
            table,
            ", ".join(unguarded),
            staging_url,
        )
