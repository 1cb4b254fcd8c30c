"""The ``erasure`` job: one erasure batch (operations/erasure_batch.py) in the load pool.

**Why the load pool.** The batch reads each partition's loaded position and then deletes; a
load landing rows of the subject between the two would be missed by that pass. The op runs
in ``bigquery_load``, the pool of one slot the load, poll and merge ops hold
(``dagster.yaml``), so no load or merge runs while it does, and exactly-once loading is
untouched (an erasure never writes the load state). A table delivered through the Storage
Write API is written by stage runs, outside the pool: its rows are appended before the done
file that commits them, so a pass that did not see the commit sees the request still pending
and the next pass deletes them.
"""

# No ``from __future__ import annotations``: dagster reads the config class from the annotation.
import os
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg

from kbqe_dagster.defs.bigquery.jobs import LOAD_POOL
from kbqe_dagster.defs.erasure.audit import CHECK_NAME, audit_key, audit_verdict
from kbqe_dagster.operations.erasure_batch import apply_erasures
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.cluster import watermarks_of
from kbqe_dagster.resources.kafka.erasure_requests import new_request_messages

ERASURE_JOB = "erasure"
ERASURE_OP = "apply_erasures"
ERASURE_TAG = "kbqe/erasure"
"""On every erasure run: dagster.yaml lets one run at a time (the op's pool already does)."""


@dg.op(name=ERASURE_OP, pool=LOAD_POOL, out={}, tags={"kbqe/step": "erasure"})
def apply_erasures_op(
    context: dg.OpExecutionContext,
    pipeline: PipelineResource,
    staging: StagingResource,
    kafka: KafkaResource,
    bigquery: BigQueryResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Apply the new erasure requests of the requests topic and re-run the pending ones:
    one DELETE per table, audited (subjects only as salted hashes, in the table and here)."""
    config = pipeline.load()
    settings = kafka.settings()

    def marks(topics):
        return {tp: (w.low, w.high) for tp, w in watermarks_of(settings, topics).items()}

    store, tables = staging.store(), bigquery.erasure_tables()
    report = apply_erasures(
        config,
        store,
        tables,
        marks,
        salt=os.environ.get(config.erasure.salt_env, ""),
        now=datetime.now(UTC),
        read_requests=lambda topic, offsets: new_request_messages(settings, topic, offsets),
    )
    for r in report.requests:
        context.log.info(
            "erasure request %s (%s): %s, %d row(s); %s",
            r.request_id, r.source, r.status, r.rows_deleted, r.note,
        )  # fmt: skip
    yield dg.AssetMaterialization(
        asset_key=audit_key(config),
        metadata={
            "requests": len(report.requests),
            "complete": sum(r.status == "complete" for r in report.requests),
            "pending": sum(r.status == "pending" for r in report.requests),
            "refused": sum(r.status == "refused" for r in report.requests),
            "rows_deleted": report.rows_deleted,
            "erasure_bytes_processed": report.bytes_processed,
            "tables": dg.MetadataValue.json([t.to_json() for t in report.tables]),
            "requests_read": dg.MetadataValue.json(
                {str(p): o for p, o in sorted(report.requests_read.items())}
            ),
        },
    )
    if config.erasure.requests_topic:
        passed, metadata = audit_verdict(config, store, settings, tables)
        yield dg.AssetCheckEvaluation(
            asset_key=audit_key(config), check_name=CHECK_NAME, passed=passed, metadata=metadata
        )


@dg.job(
    name=ERASURE_JOB,
    description="Erase data subjects' rows: new requests of erasure.requests_topic and the "
    "pending ones, one DELETE per table, audited (docs/operations.md, 'Erasure').",
    tags={ERASURE_TAG: "1"},
)
def erasure_job() -> None:
    apply_erasures_op()
