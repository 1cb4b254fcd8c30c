"""The schema registry (Confluent-compatible: Confluent, Apicurio ccompat, Karapace,
Redpanda) through confluent-kafka's client, with per-process caching.

Found schemas are cached for the life of the process (ids are immutable). A missing id is
cached as missing only briefly, then asked again: a schema registered a moment ago must not
dead-letter a whole range.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from kbqe_dagster.core.client_properties import redacted
from kbqe_dagster.core.errors import ConfigError, KbqeError

if TYPE_CHECKING:
    # Imported where a client is built or its error caught, not here: the client imports
    # authlib, joserfc and an HTTP stack (~11 MB), which a stage run's driver, which only
    # carries these settings to its tasks, never uses. The stage workers' daemon preloads
    # them (resources/spark_daemon.py).
    from confluent_kafka.schema_registry import SchemaRegistryClient


def __getattr__(name: str) -> Any:
    """``SchemaRegistryClient``, imported on first use (above) and kept as this module's."""
    if name != "SchemaRegistryClient":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from confluent_kafka.schema_registry import SchemaRegistryClient

    globals()[name] = SchemaRegistryClient
    return SchemaRegistryClient


def _client_class() -> type[SchemaRegistryClient]:
    # Through the module, so the first use imports it and a test's stand-in is found.
    return sys.modules[__name__].SchemaRegistryClient


_PROXY_VARIABLES = (
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
)
"""What httpx reads for a proxy (``trust_env``)."""

NUMBER_PROPERTIES = frozenset(
    {
        "timeout",
        "cache.capacity",
        "cache.latest.ttl.sec",
        "max.retries",
        "retries.wait.ms",
        "retries.max.wait.ms",
    }
)
"""The registry client's properties it takes only as numbers (it raises a TypeError for a
string): a value from the environment is converted (:func:`property_value`)."""

OWN_FIELDS = {"url": "url", "basic.auth.user.info": "basic_auth_user_info",
              "ssl.ca.location": "ssl_ca_location"}  # fmt: skip
"""The client properties :class:`RegistrySettings` holds in fields of their own (the URL is
cleaned of credentials, the credentials go to the exporter's redactor, the CA decides the TLS
context): never among its ``client_properties``."""


class RegistryUnavailableError(KbqeError):
    """The schema registry could not be reached (not: the id does not exist)."""


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to authenticate. Credentials written into the URL
    (``https://user:password@host/...``, which confluent-kafka accepts) are moved into
    ``basic_auth_user_info``: the URL is shown by ``repr``, in error messages, and by httpx,
    which logs every request's URL at INFO."""

    url: str
    basic_auth_user_info: str | None = None  # "user:password"; from the environment only
    ssl_ca_location: str | None = None
    client_properties: tuple[tuple[str, str | int | float], ...] = ()
    """Any other property of confluent-kafka's ``SchemaRegistryClient``: client certificates
    (``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``), bearer
    authentication, timeouts, ... A tuple of pairs, not a dict: these settings key the
    process's schema cache, so they must be hashable."""

    def __post_init__(self) -> None:
        for name, _ in self.client_properties:
            if name in OWN_FIELDS:
                raise ConfigError(
                    f"schema registry: {name} is RegistrySettings.{OWN_FIELDS[name]}, "
                    "not one of its client_properties"
                )
        url, user_info = split_user_info(self.url)
        if user_info is None:
            return
        if self.basic_auth_user_info:
            raise ConfigError(
                f"schema registry {url}: credentials are given both in the URL and as "
                "basic_auth_user_info; give them once (basic_auth_user_info)"
            )
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "basic_auth_user_info", user_info)

    def client_config(self) -> dict:
        conf: dict[str, Any] = {"url": self.url, **dict(self.client_properties)}
        if self.basic_auth_user_info:
            conf["basic.auth.user.info"] = self.basic_auth_user_info
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        elif self.plain_http:
            # confluent-kafka's client builds a TLS context for every client, and the
            # default one loads the whole CA bundle (~16 ms of CPU: a stage worker's first
            # range paid it). Over plain HTTP and no proxy from the environment (httpx
            # would reach an https:// proxy with it) no TLS context is ever used (the client
            # does not follow redirects), so it gets the empty one ``False`` asks for.
            conf["ssl.ca.location"] = False
        return conf

    @property
    def plain_http(self) -> bool:
        """Every URL of the registry is ``http://`` and no proxy is set in the environment:
        no TLS anywhere."""
        if any(os.environ.get(name) for name in _PROXY_VARIABLES):
            return False
        return all(u.strip().lower().startswith("http://") for u in self.url.split(","))

    def __repr__(self) -> str:
        auth = "***" if self.basic_auth_user_info else None
        shown = redacted(dict(self.client_properties))
        return (
            f"RegistrySettings(url={self.url!r}, basic_auth_user_info={auth!r}, "
            f"client_properties={shown})"
        )


def property_value(name: str, text: str) -> str | int | float:
    """A registry client property's value from its environment variable's text: a number for
    the properties the client takes only as numbers, else the text."""
    if name not in NUMBER_PROPERTIES:
        return text
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(
                f"schema registry property {name}: {text!r} is not a number"
            ) from None


def split_user_info(url: str) -> tuple[str, str | None]:
    """``(url without credentials, "user:password" or None)``; every URL of a comma-separated
    list is cleaned; the credentials are those of the first URL that carries any."""
    cleaned, found = [], None
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.username is None and parts.password is None:
            cleaned.append(one.strip())
            continue
        if found is None:
            found = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        host = parts.netloc.rpartition("@")[2]
        cleaned.append(urlunsplit(parts._replace(netloc=host)))
    return ",".join(cleaned), found


@dataclass(frozen=True)
class SchemaReference:
    """A schema's import of another registered subject version (``references`` in the
    registry API): ``name`` is how the importing schema names it (a ``.proto`` import path)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    schema_id: int
    schema_type: str  # AVRO, PROTOBUF, JSON
    schema: Any  # parsed JSON for AVRO, the raw string otherwise
    references: tuple[SchemaReference, ...] = ()


class SchemaLookup:
    """Schema by id: cached when found, negatively cached for ``missing_ttl`` seconds.

    A registry never changes what an id or a subject version means, so what was found is kept
    for the life of the process and shared by every lookup of the same registry: a stage
    worker is reused for range after range, and each range used to build its own client
    (~20 ms, most of it loading the TLS trust store) and ask again for every schema. The
    client is built on the first question. What was *not* found is remembered per lookup only
    (one range): an id may be registered a moment later."""

    def __init__(self, settings: RegistrySettings, missing_ttl: float = 30.0) -> None:
        self._shared = _shared_cache(settings)
        self._found = self._shared.found
        self._versions = self._shared.versions
        self._missing: dict[int, float] = {}
        self._missing_ttl = missing_ttl

    @property
    def _client(self) -> SchemaRegistryClient:
        return self._shared.client()

    def get(self, schema_id: int) -> RegisteredSchema | None:
        """The schema, or None when the registry says the id does not exist."""
        if schema_id in self._found:
            return self._found[schema_id]
        seen_missing = self._missing.get(schema_id)
        if seen_missing is not None and time.monotonic() - seen_missing < self._missing_ttl:
            return None
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                self._missing[schema_id] = time.monotonic()
                return None
            raise RegistryUnavailableError(f"schema registry error for id {schema_id}: {e}") from e
        except Exception as e:  # connection errors surface as requests/httpx exceptions
            raise RegistryUnavailableError(
                f"schema registry unreachable for id {schema_id}: {e}"
            ) from e
        found = _registered(schema_id, schema)
        self._found[schema_id] = found
        self._missing.pop(schema_id, None)
        return found

    def get_reference(self, reference: SchemaReference) -> RegisteredSchema | None:
        """The subject version a schema references (cached: a version never changes), or None
        when the registry does not have it."""
        key = (reference.subject, reference.version)
        if key in self._versions:
            return self._versions[key]
        where = f"subject {reference.subject!r} version {reference.version}"
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            version = self._client.get_version(reference.subject, reference.version)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                return None
            raise RegistryUnavailableError(f"schema registry error for {where}: {e}") from e
        except Exception as e:  # connection errors surface as requests/httpx exceptions
            raise RegistryUnavailableError(f"schema registry unreachable for {where}: {e}") from e
        found = self._versions[key] = _registered(version.schema_id, version.schema)
        return found


@dataclass
class _RegistryCache:
    """What every :class:`SchemaLookup` of one registry shares within a process."""

    settings: RegistrySettings
    found: dict[int, RegisteredSchema] = field(default_factory=dict)
    versions: dict[tuple[str, int], RegisteredSchema] = field(default_factory=dict)
    _client: SchemaRegistryClient | None = None

    def client(self) -> SchemaRegistryClient:
        if self._client is None:
            self._client = _client_class()(self.settings.client_config())
        return self._client


_CACHES: dict[RegistrySettings, _RegistryCache] = {}


def forget_found_schemas() -> None:
    """Empty this process's shared cache, as a fresh stage worker starts (the fault suite's
    registry outage needs a worker that has not seen the schema yet)."""
    _CACHES.clear()


def _shared_cache(settings: RegistrySettings) -> _RegistryCache:
    cache = _CACHES.get(settings)
    if cache is None:
        cache = _CACHES[settings] = _RegistryCache(settings)
    return cache


def _registered(schema_id: int, schema: Any) -> RegisteredSchema:
    schema_type = (schema.schema_type or "AVRO").upper()
    parsed = json.loads(schema.schema_str) if schema_type == "AVRO" else schema.schema_str
    references = tuple(
        SchemaReference(r.name, r.subject, int(r.version)) for r in (schema.references or ())
    )
    return RegisteredSchema(schema_id, schema_type, parsed, references)


def key_schema_fields(settings: RegistrySettings, topic: str) -> tuple[str, ...]:
    """The field names of the latest schema of ``<topic>-key`` (the subject Debezium's Avro
    converter registers a topic's keys under): a keyed Debezium topic's default key."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    subject = f"{topic}-key"
    try:
        latest = _client_class()(settings.client_config()).get_latest_version(subject)
    except SchemaRegistryError as e:
        raise RegistryUnavailableError(
            f"{topic}: no key schema under subject {subject!r} ({e}); set keyed.key in the "
            "pipeline file"
        ) from e
    schema = json.loads(latest.schema.schema_str)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise RegistryUnavailableError(
            f"{topic}: the key schema of {subject!r} is not a record; set keyed.key"
        )
    return tuple(f["name"] for f in schema["fields"])
