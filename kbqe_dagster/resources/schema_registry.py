"""The schema registry (Confluent-compatible: Confluent, Apicurio ccompat, Karapace,
Redpanda) through confluent-kafka's client, with per-process caching.

Found schemas are cached for the life of the process (ids are immutable). A missing id is
cached as missing only briefly, then asked again: a schema registered a moment ago must not
dead-letter a whole range.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from kbqe_dagster.core.errors import KbqeError


class RegistryUnavailableError(KbqeError):
    """The schema registry could not be reached (not: the id does not exist)."""


@dataclass(frozen=True)
class RegistrySettings:
    url: str
    basic_auth_user_info: str | None = None  # "user:password"; from the environment only
    ssl_ca_location: str | None = None

    def client_config(self) -> dict:
        conf: dict[str, Any] = {"url": self.url}
        if self.basic_auth_user_info:
            conf["basic.auth.user.info"] = self.basic_auth_user_info
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        return conf

    def __repr__(self) -> str:
        auth = "***" if self.basic_auth_user_info else None
        return f"RegistrySettings(url={self.url!r}, basic_auth_user_info={auth!r})"


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema_type: str  # AVRO, PROTOBUF, JSON
    schema: Any  # parsed JSON for AVRO, the raw string otherwise


class SchemaLookup:
    """Schema by id: cached when found, negatively cached for ``missing_ttl`` seconds."""

    def __init__(self, settings: RegistrySettings, missing_ttl: float = 30.0) -> None:
        self._client = SchemaRegistryClient(settings.client_config())
        self._found: dict[int, RegisteredSchema] = {}
        self._missing: dict[int, float] = {}
        self._missing_ttl = missing_ttl

    def get(self, schema_id: int) -> RegisteredSchema | None:
        """The schema, or None when the registry says the id does not exist."""
        if schema_id in self._found:
            return self._found[schema_id]
        seen_missing = self._missing.get(schema_id)
        if seen_missing is not None and time.monotonic() - seen_missing < self._missing_ttl:
            return None
        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                self._missing[schema_id] = time.monotonic()
                return None
            raise RegistryUnavailableError(f"schema registry error for id {schema_id}: {e}") from e
        except Exception as e:  # connection errors surface as requests/httpx exceptions
            raise RegistryUnavailableError(f"schema registry unreachable for id {schema_id}: {e}") from e
        schema_type = (schema.schema_type or "AVRO").upper()
        parsed = json.loads(schema.schema_str) if schema_type == "AVRO" else schema.schema_str
        found = RegisteredSchema(schema_id, schema_type, parsed)
        self._found[schema_id] = found
        self._missing.pop(schema_id, None)
        return found
