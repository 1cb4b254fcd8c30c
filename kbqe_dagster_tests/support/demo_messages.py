"""Good messages of the demo schemas (orders v1 and v2, page views) in a run's own datasets, over
three event days: what the stage-then-load tests produce and count."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import (
    ORDER_V1,
    ORDER_V2,
    PAGE_VIEW,
    SampleMessage,
)
from kbqe_dagster_tests.support.framing import avro_body

GOOD = 1_500


TODAY = date.today()


def good_messages(run: str, ids: dict[str, int]) -> list[SampleMessage]:
    """Orders v1 and page views in this run's datasets, over three event days."""
    out = []
    for i in range(GOOD):
        day = TODAY - timedelta(days=i % 3)
        moment = datetime.combine(day, time(12, i % 60), tzinfo=UTC)
        if i % 2:
            table = (f"acme_sales_{run}", "orders")
            order = {
                "datasetName": table[0],
                "tableName": table[1],
                "orderId": f"o-{i}",
                "customerId": i,
                "amountCents": 100 + i,
                "currency": "EUR",
                "eventTime": moment.isoformat(timespec="milliseconds"),
            }
            if i % 4 == 3:  # every other order with the evolved schema (adds `coupon`)
                value = encode_frame(
                    ids["orders_v2"], avro_body(ORDER_V2, {**order, "coupon": f"c{i}"})
                )
            else:
                value = encode_frame(ids["orders_v1"], avro_body(ORDER_V1, order))
        else:
            table = (f"acme_web_{run}", "page_views")
            value = encode_frame(
                ids["page_views"],
                avro_body(
                    PAGE_VIEW,
                    {
                        "datasetName": table[0],
                        "tableName": table[1],
                        "url": f"/p/{i}",
                        "sessionId": f"s-{i}",
                        "durationMs": i,
                        "occurredAt": moment,
                    },
                ),
            )
        out.append(SampleMessage(None, value, table, None, day.isoformat()))
    return out
