"""The audit table's key, its check's name and the check's verdict: shared by the check
(assets.py) and the erasure op (jobs.py), which evaluates it after each batch."""

from __future__ import annotations

from typing import Any

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.operations.erasure_batch import read_state
from kbqe_dagster.resources.bigquery.erasure_tables import ErasureTables
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.erasure_requests import new_request_messages

CHECK_NAME = "erasure_audit_holds_every_request"


def audit_key(config: PipelineConfig) -> dg.AssetKey:
    audit = config.erasure.audit
    return dg.AssetKey(["bigquery", audit.dataset, audit.table])


def audit_verdict(
    config: PipelineConfig, store: Any, settings: KafkaSettings, tables: ErasureTables
) -> tuple[bool, dict[str, Any]]:
    """Whether the audit table holds every request read from the requests topic (up to the
    erasure state's position), and the figures: for the standalone check and for the
    erasure op, which evaluates it after each batch."""
    topic = config.erasure.requests_topic or ""
    read_to = read_state(store).requests_read
    messages, _ = new_request_messages(settings, topic, {})
    seen = {
        (key or b"").decode("utf-8", "replace") or f"{partition}/{offset}"
        for key, _, partition, offset in messages
        if offset < read_to.get(partition, 0)
    }
    audit = config.erasure.audit
    audited = tables.audited_request_ids(audit.dataset, audit.table)
    missing = sorted(seen - audited)
    return not missing, {
        "requests_seen": len(seen),
        "requests_audited": len(seen & audited),
        "missing": dg.MetadataValue.json(missing[:50]),
    }
