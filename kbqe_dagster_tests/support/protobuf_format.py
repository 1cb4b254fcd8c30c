"""A topic of orders in Protobuf under registered schemas (``V1``, ``V2``, one importing a common
file, and broken ones), the producer's message classes compiled from the same text, and the
pipeline config that reads the topic: what the Protobuf format tests, Python path and kernel,
share."""

from __future__ import annotations

from google.protobuf import descriptor_pool, message_factory

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files
from kbqe_dagster.resources.schema_registry import (
    RegisteredSchema,
    SchemaReference,
)
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
from kbqe_dagster_tests.support.framing import protobuf_framed

TOPIC = "shop.orders"


COMMON = """syntax = "proto3";
package acme.common;
message Money { string currency = 1; int64 units = 2; }
"""


V1 = """syntax = "proto3";
package acme.orders;
import "google/protobuf/timestamp.proto";
import "acme/common.proto";
message Order {
  string datasetName = 1;
  string tableName = 2;
  int64 id = 3;
  google.protobuf.Timestamp placed_at = 4;
  acme.common.Money total = 5;
  repeated Line lines = 6;
  message Line { string sku = 1; uint32 qty = 2; }
}
message Refund { int64 order_id = 1; google.protobuf.Timestamp placed_at = 2; }
"""


V2 = V1.replace("  message Line", "  optional string coupon = 7;\n  message Line")


RECURSIVE = 'syntax = "proto3"; message Node { string v = 1; Node next = 2; }'


BROKEN = 'syntax = "proto3"; message Order { Missing m = 1; }'


REF = (SchemaReference("acme/common.proto", "acme-common", 1),)


IDS = {"v1": 21, "v2": 22, "recursive": 23, "broken": 24, "avro": 25, "json": 26, "lost_ref": 27}


def fake_registry() -> FakeSchemaRegistry:
    """The registry boundary: this file's schemas under fixed ids, and the one import they
    reference (acme-common version 1)."""
    return FakeSchemaRegistry(
        {
            IDS["v1"]: RegisteredSchema(IDS["v1"], "PROTOBUF", V1, REF),
            IDS["v2"]: RegisteredSchema(IDS["v2"], "PROTOBUF", V2, REF),
            IDS["recursive"]: RegisteredSchema(IDS["recursive"], "PROTOBUF", RECURSIVE),
            IDS["broken"]: RegisteredSchema(IDS["broken"], "PROTOBUF", BROKEN),
            IDS["avro"]: RegisteredSchema(
                IDS["avro"], "AVRO", {"type": "record", "name": "A", "fields": []}
            ),
            IDS["json"]: RegisteredSchema(IDS["json"], "JSON", '{"type": "object"}'),
            IDS["lost_ref"]: RegisteredSchema(
                IDS["lost_ref"],
                "PROTOBUF",
                V1,
                (SchemaReference("acme/common.proto", "acme-common", 9),),
            ),
        },
        references={("acme-common", 1): RegisteredSchema(7, "PROTOBUF", COMMON)},
    )


def classes(text: str) -> dict:
    """The producer's side: message classes compiled from the same ``.proto`` text."""
    pool = descriptor_pool.DescriptorPool()
    for proto in compile_files({ROOT_FILE: text, "acme/common.proto": COMMON}).file:
        pool.Add(proto)
    root = pool.FindFileByName(ROOT_FILE)
    return {
        name: message_factory.GetMessageClass(d) for name, d in root.message_types_by_name.items()
    }


ORDER_V1, REFUND = classes(V1)["Order"], classes(V1)["Refund"]


ORDER_V2 = classes(V2)["Order"]


def order(cls=ORDER_V1, i: int = 1, **extra):
    message = cls(datasetName="shop", tableName="orders", id=i, **extra)
    message.placed_at.seconds = 1_726_238_205 + i  # 2024-09-13T14:36:45Z
    message.total.currency, message.total.units = "EUR", 10 * i
    message.lines.add(sku=f"s{i}", qty=i)
    return message


def framed(version: str, message, indexes=(0,)) -> bytes:
    return protobuf_framed(IDS[version], message, indexes)


def pipeline(**topic):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "protobuf",
                    "event_time": {"fields": ["placed_at"]},
                    **topic,
                }
            ],
            "allowed_destinations": ["shop.*"],
        }
    )
