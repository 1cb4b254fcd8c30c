"""The audit table's asset and its check ``erasure_audit_holds_every_request``: every request
the erasure job has read from the requests topic (up to its recorded position) has a row in
the audit table. A request read but not audited would be one applied without a trace, or one
lost between the read and its pass."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.erasure.audit import CHECK_NAME, audit_key, audit_verdict
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource


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
        description="Every request read from erasure.requests_topic has a row in the audit "
        "table (also evaluated by the erasure job after each batch).",
    )
    def audit_holds_every_request(
        pipeline: PipelineResource,
        staging: StagingResource,
        kafka: KafkaResource,
        bigquery: BigQueryResource,
    ) -> dg.AssetCheckResult:
        passed, metadata = audit_verdict(
            pipeline.load(), staging.store(), kafka.settings(), bigquery.erasure_tables()
        )
        return dg.AssetCheckResult(passed=passed, metadata=metadata)

    return [audit_holds_every_request]
