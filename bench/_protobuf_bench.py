"""The Protobuf variant of the stage benchmark (``bench_stage.py --protobuf-values``): the same
16-field order row as Confluent-framed Protobuf under a registry ``.proto``
(:data:`PROTO`: an enum, a repeated string, a map, a nested message with a ``Timestamp``, a
proto3 ``optional``), serialised with classes compiled from that text by the same protoc the
stage path uses, staged by ``format: protobuf``."""

from __future__ import annotations

import datetime as dt
import random

from bench_hot_path import make_record

PROTO = """syntax = "proto3";
package com.acme.events;
import "google/protobuf/timestamp.proto";
message OrderEvent {
  string eventId = 1;
  string eventTime = 2;
  string datasetName = 3;
  string tableName = 4;
  int64 userId = 5;
  string sessionId = 6;
  double amount = 7;
  Currency currency = 8;
  int32 quantity = 9;
  bool isTest = 10;
  repeated string tags = 11;
  map<string, string> attributes = 12;
  Payload payload = 13;
  optional string note = 14;
  string createdDate = 15;
  string ip = 16;
  enum Currency { EUR = 0; USD = 1; GBP = 2; JPY = 3; }
  message Payload { google.protobuf.Timestamp eventTime = 1; string source = 2; int32 version = 3; }
}
"""


def order_class():
    from google.protobuf import descriptor_pool, message_factory

    from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files

    pool = descriptor_pool.DescriptorPool()
    for proto in compile_files({ROOT_FILE: PROTO}).file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("com.acme.events.OrderEvent"))


def build_protobuf_values(count: int, unique: int, seed: int) -> list[bytes]:
    """The row as message indexes (``[0]``) + Protobuf binary (the caller frames it)."""
    cls = order_class()
    rng = random.Random(seed)
    distinct = []
    for _ in range(min(unique, count)):
        row = make_record(rng)
        payload = row.pop("payload")
        row["createdDate"] = row["createdDate"].isoformat()
        if row["note"] is None:
            del row["note"]
        message = cls(**row)
        moment: dt.datetime = payload["eventTime"]
        message.payload.eventTime.FromDatetime(moment)
        message.payload.source, message.payload.version = payload["source"], payload["version"]
        distinct.append(b"\x00" + message.SerializeToString())
    return [distinct[i % len(distinct)] for i in range(count)]
