"""The audit table's asset and its check ``erasure_audit_holds_every_request``: every request
the erasure job has read from the requests topic (up to its recorded position) has a row in
the audit table. A request read but not audited would be one applied without a trace, or one
lost between the read and its pass."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.erasure.jobs import audit_key
from kbqe_dagster.operations.erasure import read_state
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.erasure_requests import new_request_messages

CHECK_NAME = "erasure_audit_holds_every_request"


def erasure_specs(config: PipelineConfig) -> list[dg.AssetSpec]:
    if not config.erasure.enabled:
        return []
    audit = config.erasure.audit
    return [
        dg.AssetSpec(
            key=audit_key(config),
            description=(
                f"Audit of erasure requests `{audit.dataset}.{audit.table}`: one row per "
                "request and pass (request id, the subject's salted hash, tables, rows "
                "deleted, status, when), written by the erasure job and `kbqe erase`."
            ),
            group_name="erasure",
            kinds={"bigquery"},
        )
    ]


def erasure_checks(config: PipelineConfig) -> list[dg.AssetChecksDefinition]:
    if not config.erasure.enabled or not config.erasure.requests_topic:
        return []

    @dg.asset_check(
        asset=audit_key(config),
        name=CHECK_NAME,
        description="Every request read from erasure.requests_topic has a row in the audit table.",
    )
    def audit_holds_every_request(
        pipeline: PipelineResource,
        staging: StagingResource,
        kafka: KafkaResource,
        bigquery: BigQueryResource,
    ) -> dg.AssetCheckResult:
        pipeline_config = pipeline.load()
        topic = pipeline_config.erasure.requests_topic or ""
        read_to = read_state(staging.store()).requests_read
        messages, _ = new_request_messages(kafka.settings(), topic, {})
        seen = {
            (key or b"").decode("utf-8", "replace") or f"{partition}/{offset}"
            for key, _, partition, offset in messages
            if offset < read_to.get(partition, 0)
        }
        audit = pipeline_config.erasure.audit
        audited = bigquery.erasure_tables().audited_request_ids(audit.dataset, audit.table)
        missing = sorted(seen - audited)
        return dg.AssetCheckResult(
            passed=not missing,
            metadata={
                "requests_seen": len(seen),
                "requests_audited": len(seen & audited),
                "missing": dg.MetadataValue.json(missing[:50]),
            },
        )

    return [audit_holds_every_request]
