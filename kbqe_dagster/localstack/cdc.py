"""Change data capture on the local stack: Debezium PostgreSQL connectors on the Kafka Connect
worker (``localstack/connect.py``), created, awaited and deleted through Connect's REST API,
and the connector configurations that write Avro through the stack's Apicurio registry or
JSON with embedded schemas.

Avro framing: Apicurio's converter is configured to write what Confluent's serializer writes,
``0x00`` + a 4-byte big-endian schema id + the Avro body, with no id headers. The id is the
registry's *content id* (``apicurio.registry.use-id=contentId``), which is what Apicurio 3's
Confluent-compatible API calls a schema id: ``GET /apis/ccompat/v7/schemas/ids/<id>``
resolves it, so the project's Confluent-framed readers decode these messages as any other.
Schemas are registered under the Confluent subject names (``<topic>-key``/``<topic>-value``,
Apicurio's default topic strategy in the default group).

Standard library only (``probe.request_json``), like the rest of the stack code.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.endpoints import HOST, LocalEndpoints
from kbqe_dagster.localstack.postgres import DATABASE, PASSWORD, USER
from kbqe_dagster.localstack.probe import request_json

POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
APICURIO_AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
REQUEST_TIMEOUT = 30.0


def apicurio_avro_converter(endpoints: LocalEndpoints, prefix: str) -> dict[str, str]:
    """Settings of Apicurio's Avro converter as ``<prefix>.converter`` (``key`` or
    ``value``), writing Confluent framing with content ids (see the module docstring)."""
    settings = {
        "": APICURIO_AVRO_CONVERTER,
        ".apicurio.registry.url": f"http://{HOST}:{endpoints.registry_port}/apis/registry/v2",
        ".apicurio.registry.auto-register": "true",
        ".apicurio.registry.find-latest": "true",
        # the id in the payload, not in record headers
        ".apicurio.registry.headers.enabled": "false",
        # 4 bytes, as Confluent's framing, holding the content id the ccompat API serves
        ".apicurio.registry.id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
        ".apicurio.registry.use-id": "contentId",
    }
    return {f"{prefix}.converter{key}": value for key, value in settings.items()}


def json_converter(prefix: str, schemas: bool = True) -> dict[str, str]:
    """Connect's JsonConverter as ``<prefix>.converter``, with each message's schema embedded
    (``{"schema": ..., "payload": ...}``) unless ``schemas`` is False."""
    return {
        f"{prefix}.converter": JSON_CONVERTER,
        f"{prefix}.converter.schemas.enable": str(schemas).lower(),
    }


def debezium_postgres_config(
    endpoints: LocalEndpoints,
    topic_prefix: str,
    slot_name: str,
    tables: list[str],
    converter: str = "avro",
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A Debezium PostgreSQL connector on the local PostgreSQL: ``pgoutput``, its own slot
    and publication (one connector each, so two may watch the same tables), the ``tables``
    (``schema.table``), Debezium's defaults for types (``time.precision.mode=adaptive``,
    ``decimal.handling.mode=precise``), keys and values through ``converter`` (``avro`` or
    ``json``), topics ``<topic_prefix>.<schema>.<table>`` created by the worker with one
    partition. ``overrides`` last."""
    if converter == "avro":
        converters = {
            **apicurio_avro_converter(endpoints, "key"),
            **apicurio_avro_converter(endpoints, "value"),
        }
    elif converter == "json":
        converters = {**json_converter("key"), **json_converter("value")}
    else:
        raise StackError(f"debezium: unknown converter {converter!r} (avro or json)")
    config = {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": HOST,
        "database.port": str(endpoints.postgres_port),
        "database.user": USER,
        "database.password": PASSWORD,
        "database.dbname": DATABASE,
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot_name,
        "publication.name": f"{slot_name}_publication",
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": "initial",
        "time.precision.mode": "adaptive",
        "decimal.handling.mode": "precise",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        **converters,
    }
    config.update(overrides or {})
    return config


@dataclass(frozen=True)
class ConnectClient:
    """Connect's REST API at ``url`` (the worker's ``LocalEndpoints.connect_url``)."""

    url: str

    def put(self, name: str, config: Mapping[str, str]) -> dict[str, Any]:
        """Create the connector ``name``, or replace its configuration."""
        answer = request_json(
            "PUT", f"{self.url}/connectors/{name}/config", dict(config), REQUEST_TIMEOUT
        )
        if answer is None or answer.status not in (200, 201):
            raise StackError(
                f"connect at {self.url}: creating connector {name} failed: {_detail(answer)}"
            )
        return answer.body if isinstance(answer.body, dict) else {}

    def delete(self, name: str) -> bool:
        """Delete the connector ``name``; False when there was none."""
        answer = request_json("DELETE", f"{self.url}/connectors/{name}", None, REQUEST_TIMEOUT)
        if answer is not None and answer.status == 404:
            return False
        if answer is None or answer.status not in (200, 204):
            raise StackError(
                f"connect at {self.url}: deleting connector {name} failed: {_detail(answer)}"
            )
        return True

    def names(self) -> list[str]:
        answer = request_json("GET", f"{self.url}/connectors", None, REQUEST_TIMEOUT)
        if answer is None or answer.status != 200 or not isinstance(answer.body, list):
            raise StackError(f"connect at {self.url}: listing connectors failed: {_detail(answer)}")
        return [str(n) for n in answer.body]

    def status(self, name: str) -> dict[str, Any] | None:
        """The connector's status document, None when it does not exist (yet)."""
        answer = request_json("GET", f"{self.url}/connectors/{name}/status", None, REQUEST_TIMEOUT)
        if answer is None or answer.status == 404:
            return None
        return answer.body if isinstance(answer.body, dict) else None

    def wait_running(self, name: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the connector and all its tasks (at least one) run; a StackError with
        the worker's trace as soon as one of them failed, or at the timeout."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            last = self.status(name)
            if last is not None:
                failed = _failure(last)
                if failed:
                    raise StackError(f"connect: connector {name} failed: {failed}")
                tasks = last.get("tasks") or []
                if (
                    last.get("connector", {}).get("state") == "RUNNING"
                    and tasks
                    and all(t.get("state") == "RUNNING" for t in tasks)
                ):
                    return last
            time.sleep(0.5)
        raise StackError(
            f"connect: connector {name} not running after {timeout:.0f}s (last status {last})"
        )

    def wait_deleted(self, name: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name not in self.names():
                return
            time.sleep(0.5)
        raise StackError(f"connect: connector {name} still listed after {timeout:.0f}s")


def _failure(status: Mapping[str, Any]) -> str:
    parts = [("connector", status.get("connector") or {})]
    parts += [(f"task {t.get('id')}", t) for t in status.get("tasks") or []]
    for what, part in parts:
        if part.get("state") == "FAILED":
            trace = str(part.get("trace") or "no trace").strip().splitlines()
            return f"{what} FAILED: {' | '.join(trace[:6])}"
    return ""


def _detail(answer: Any) -> str:
    if answer is None:
        return "no answer (is `kbqe stack up connect` running?)"
    return f"HTTP {answer.status}: {answer.body}"
