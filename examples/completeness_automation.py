"""A daily aggregate downstream of ``bigquery/acme_sales/orders``, materialized **once per day,
after that day is complete** (every Kafka partition feeding the table staged and loaded past
the day's end plus the lateness; see docs/architecture.md, Completeness).

Run it as the code location instead of ``kbqe_dagster.definitions`` (it includes them)::

    dagster dev -f examples/completeness_automation.py      # from the repository root

and turn on ``default_automation_condition_sensor`` (Automation tab) next to kbqe's own
``completeness_sensor``. Each time ``completeness_sensor`` reports ``day_complete`` passed for
a day of ``acme_sales.orders``, the condition requests that day's partition of
``acme_sales/orders_daily`` once; late events loaded afterwards do not request it again
(they are counted as ``late_after_complete`` on the check).
"""

# No ``from __future__ import annotations``: dagster resolves the context annotation.
import dagster as dg
from google.cloud import bigquery as bq

from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.completeness.automation import once_after_day_complete
from kbqe_dagster.defs.keys import DEFAULT_PARTITION_START
from kbqe_dagster.resources.bigquery import BigQueryResource

ORDERS = dg.AssetKey(["bigquery", "acme_sales", "orders"])
DAILY = dg.DailyPartitionsDefinition(start_date=DEFAULT_PARTITION_START.isoformat(), end_offset=1)

# Idempotent per day: the partition's rows are replaced, so a rerun never double counts.
AGGREGATE = """
CREATE TABLE IF NOT EXISTS acme_sales.orders_daily (day DATE, orders INT64, loaded_at TIMESTAMP);
DELETE FROM acme_sales.orders_daily WHERE day = @day;
INSERT INTO acme_sales.orders_daily (day, orders, loaded_at)
SELECT @day, COUNT(*), CURRENT_TIMESTAMP() FROM acme_sales.orders WHERE _event_date = @day;
"""


@dg.asset(
    key=["bigquery", "acme_sales", "orders_daily"],
    deps=[ORDERS],
    partitions_def=DAILY,
    automation_condition=once_after_day_complete(ORDERS),
    group_name="reports",
    kinds={"bigquery"},
)
def orders_daily(
    context: dg.AssetExecutionContext, bigquery: BigQueryResource
) -> dg.MaterializeResult:
    """Orders per event day, computed once the day is complete in `acme_sales.orders`."""
    day = context.partition_key
    job = bigquery.client().query(
        AGGREGATE,
        job_config=bq.QueryJobConfig(
            query_parameters=[bq.ScalarQueryParameter("day", "DATE", day)]
        ),
    )
    job.result()
    return dg.MaterializeResult(metadata={"day": day, "job_id": job.job_id})


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions.merge(build_definitions(), dg.Definitions(assets=[orders_daily]))
