"""``day_complete``: a partitioned asset check on every named table asset
``bigquery/<dataset>/<table>``, one evaluation per DAY partition; on an HOUR-partitioned
table (``tables:``, core/record/partitioning.py) it is ``hour_complete``, one evaluation per HOUR
partition (key ``YYYY-MM-DDTHH``, UTC), by the same rule with the hour as the unit; on a
MONTH (YEAR) table ``month_complete`` (``year_complete``), keyed by the period's first day,
passing when the period's last day is complete. An unpartitioned table (``none``) has
``table_complete``, not partitioned: it passes when the table is complete through the newest
day that has ended (its evaluations name that day).

It passes for day D when every Kafka partition feeding the table is staged and loaded past
D's end plus the lateness (core/completeness/decision.py). ``completeness_sensor`` reports it once for
each day as it becomes complete, naming the partition's latest load as the materialization
it judged. (Executed in a run, the check evaluates the run's partition now; Dagster 1.13
cannot yet give a check-only run a partition key, so the sensor's reports are the way it is
evaluated per day.) The evaluation carries the evidence as metadata; a failing one names the
partitions holding the day back (severity WARN: an incomplete day is a state, not an error).
Downstream assets automate on it (``defs/completeness/automation.py``,
``examples/completeness_automation.py``). A later load into a complete day (late events)
is a new materialization of the partition, which Dagster shows as not checked since: the
truth, and the late records are counted (``late_after_complete``).

Wildcard datasets (``dataset.*``: one asset partitioned by table × date) have no such check:
a check cannot be partitioned by a multi-dimensional key per table; ``kbqe completeness``
reports their tables.
"""

# No ``from __future__ import annotations``: dagster resolves the context annotation.
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg

from kbqe_dagster.core.completeness.decision import Period
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.defs.bigquery.assets import unit_name
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import CompletenessReport, TableReport, evaluate
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.cluster import watermarks_of

DAY_COMPLETE = "day_complete"
HOUR_COMPLETE = "hour_complete"
MONTH_COMPLETE = "month_complete"
YEAR_COMPLETE = "year_complete"
TABLE_COMPLETE = "table_complete"
CHECK_OP = "completeness_checks"


def checked_tables(destinations: Destinations) -> list[tuple[str, str]]:
    """The tables with a ``day_complete`` check: named tables, not the dead letters."""
    return [t for t in destinations.tables if not destinations.dead_letter.is_table(*t)]


def check_name(destinations: Destinations, dataset: str, table: str) -> str:
    """``hour_complete`` on an HOUR table, ``month_complete`` (``year_complete``) on a MONTH
    (YEAR) table, ``table_complete`` on an unpartitioned one, ``day_complete`` on the
    others."""
    partitioning = destinations.partitioning(dataset, table)
    if partitioning is Partitioning.NONE:
        return TABLE_COMPLETE
    return f"{partitioning.value}_complete"


def day_complete_key(dataset: str, table: str) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(dg.AssetKey(["bigquery", dataset, table]), DAY_COMPLETE)


def check_metadata(report: TableReport, day: Period) -> dict:
    v = report.verdict
    return {
        v.unit.name: v.key(day),
        "newest_complete": v.key(v.newest_complete) or "none",
        "basis": v.basis,
        "feeding_partitions": v.partitions,
        "topics": ", ".join(report.topics),
        "held_back_by": dg.MetadataValue.json([h.as_dict() for h in v.held_back_by]),
        "late_after_complete": sum(report.late_after_complete.values()),
    }


def completeness_checks(destinations: Destinations) -> list[dg.AssetChecksDefinition]:
    tables = checked_tables(destinations)
    if not tables:
        return []
    # Partitioned check specs are a Dagster preview (1.13): the one way to give a check one
    # verdict per DAY partition that automation conditions read per partition. The warning
    # would repeat on every load of the definitions; the choice is documented in
    # docs/architecture.md (Completeness).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        specs = _specs(destinations, tables)
    return [_checks_definition(specs)]


def _specs(destinations: Destinations, tables: list[tuple[str, str]]) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            name,
            asset=dg.AssetKey(["bigquery", d, t]),
            partitions_def=destinations.time_partitions(d, t),
            description=f"Every Kafka partition feeding this table is staged and loaded past "
            f"the {unit}'s end plus the configured lateness (idle partitions never "
            f"hold a {unit} back).",
        )
        for d, t in tables
        for name in [check_name(destinations, d, t)]
        for unit in [unit_name(destinations.partitioning(d, t))]
    ]


def _checks_definition(specs: list[dg.AssetCheckSpec]) -> dg.AssetChecksDefinition:
    @dg.multi_asset_check(specs=specs, can_subset=True, name=CHECK_OP)
    def completeness_day_checks(
        context: dg.AssetCheckExecutionContext,
        pipeline: PipelineResource,
        staging: StagingResource,
        kafka: KafkaResource,
    ) -> Iterator[dg.AssetCheckResult]:
        """Evaluate ``day_complete`` (``hour_complete``) now for the run's partition."""
        settings = kafka.settings()
        report = evaluate(
            pipeline.load(),
            staging.store(),
            lambda topics: watermarks_of(settings, topics),
            datetime.now(UTC),
        )
        yield from results(context, report)

    return completeness_day_checks


def results(
    context: dg.AssetCheckExecutionContext, report: CompletenessReport
) -> Iterator[dg.AssetCheckResult]:
    """The selected checks' verdicts for the run's partition, from one evaluation."""
    for key in sorted(context.selected_asset_check_keys, key=lambda k: k.to_user_string()):
        _, dataset, table = key.asset_key.path
        found = report.tables.get(f"{dataset}.{table}")
        if found is None:
            yield dg.AssetCheckResult(
                asset_key=key.asset_key,
                check_name=key.name,
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description="no Kafka partition is known to feed this table yet",
            )
            continue
        unit = found.unit
        newest = found.verdict.newest_complete
        fallback = unit.newest_ending_by(report.observed_at)
        if key.name == TABLE_COMPLETE:  # unpartitioned: complete through the newest day ended
            day = fallback
        else:
            day = (
                unit.parse(context.partition_key)
                if context.has_partition_key
                else newest or fallback
            )
        yield dg.AssetCheckResult(
            asset_key=key.asset_key,
            check_name=key.name,
            passed=newest is not None and day <= newest,
            severity=dg.AssetCheckSeverity.WARN,
            metadata=check_metadata(found, day),
        )
