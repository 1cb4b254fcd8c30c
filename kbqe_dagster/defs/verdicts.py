"""A core check's verdict (core/load/checks.py ``Verdict``) as Dagster takes it: the event an op
yields (``verdict_evaluation``) or the result a standalone check returns (``verdict_result``),
with the same metadata. Every domain's checks build their events here."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.load.checks import Verdict


def _check_fields(key: dg.AssetKey, verdict: Verdict) -> dict:
    """What an evaluation and a result both say of a verdict: they differ only in their type."""
    return {
        "asset_key": key,
        "check_name": verdict.name,
        "passed": verdict.passed,
        "severity": dg.AssetCheckSeverity(verdict.severity),
        "description": verdict.description or None,
        "metadata": {
            k: dg.MetadataValue.json(v) if k in verdict.json_keys else v
            for k, v in verdict.metadata.items()
        },
    }


def verdict_evaluation(key: dg.AssetKey, verdict: Verdict) -> dg.AssetCheckEvaluation:
    """A core verdict as the event an op yields."""
    return dg.AssetCheckEvaluation(**_check_fields(key, verdict))


def verdict_result(key: dg.AssetKey, verdict: Verdict) -> dg.AssetCheckResult:
    """A core verdict as the result a standalone check returns."""
    return dg.AssetCheckResult(**_check_fields(key, verdict))
