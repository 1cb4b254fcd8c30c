"""A JSON topic of clicks (``TOPIC``, its declared ``SCHEMA``, one ``GOOD`` value) and the
pipeline config that reads it: what the JSON format tests, Python path and kernel, share."""

from __future__ import annotations

from kbqe_dagster.core.config.pipeline import parse_pipeline_config

TOPIC = "shop.clicks"


SCHEMA = {
    "type": "record",
    "name": "Click",
    "namespace": "shop",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "url", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "user",
            "type": [
                "null",
                {"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]},
            ],
            "default": None,
        },
    ],
}


GOOD = {
    "datasetName": "web",
    "tableName": "clicks",
    "url": "/a",
    "at": 1_726_238_205_123,
    "user": {"id": 7},
}


def pipeline(**topic):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "json",
                    "schema": SCHEMA,
                    "event_time": {"fields": ["at"]},
                    **topic,
                }
            ],
            "allowed_destinations": ["web.*"],
        }
    )
