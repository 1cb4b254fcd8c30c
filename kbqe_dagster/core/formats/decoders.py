"""User decoders (``format: decoder``): the contract between a topic and the function that
turns its messages into Avro records, as nrtkudu lets its users do.

A topic names its decoder as ``decoder: "package.module:function"``. The function is called
once per message with a :class:`RawMessage` and returns ``(record, schema)``: the record as a
``dict`` of Python values fastavro can write, and the Avro **record** schema (a ``dict``) it
fits. The schema is returned per record, so one topic may carry several record types (FIX's
NewOrderSingle and ExecutionReport); return the same schema object for the same type (a
module-level constant), never mutate it afterwards, and keep the number of distinct schemas
small: each is derived once per stage task and gets files of its own.

Refusing a message: raise :class:`~kbqe_dagster.core.errors.DecodeError` (also
``kbqe_dagster.DecodeError``) with a precise reason; the message goes to the dead letters as
``decoder_rejected`` with that text. **Any other exception** is dead-lettered too, as
``decoder_error`` naming the exception type and the decoder's line that raised it. The rule
is on purpose unlike a routing function's (whose exceptions stop the topic): a decoder parses
untrusted bytes, so its failures are per message — input it did not expect — and stopping the
topic would make a stage run fail on the same offset forever. The dead letter keeps the raw
bytes, key and headers, so messages a fixed decoder would accept can be produced again.
Nothing is silently dropped; ``on_bad_input: fail`` still stops the topic at the first such
message for those who prefer that. Only ``BaseException``\\s that are not ``Exception``\\s
(``SystemExit``, ``KeyboardInterrupt``) propagate: they stop the task, as they mean to.

The decoder is imported when the pipeline file is read (an import failure is a configuration
error at ``topics[i].decoder``), and again in every stage task, so its module must be
importable wherever stage tasks run (installed on the Spark executors, or on ``PYTHONPATH``).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import ConfigError

_SPEC_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@dataclass(frozen=True, slots=True)
class RawMessage:
    """One Kafka message as a decoder sees it (not confluent_kafka's ``Message``: a plain,
    immutable value a decoder's tests can build)."""

    value: bytes
    """The message value. Null values (tombstones) and values over ``max_message_size`` never
    reach a decoder: they are bad input before it, as on the Avro path."""
    key: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None
    """The Kafka timestamp in epoch milliseconds; ``None`` when Kafka does not know it."""
    topic: str
    partition: int
    offset: int


Decoder = Callable[[RawMessage], tuple[Mapping[str, Any], Mapping[str, Any]]]
"""``decoder(message) -> (record, schema)``; raises ``DecodeError`` to refuse a message."""


def resolve_decoder(spec: str) -> Decoder:
    """Import ``"package.module:function"``; a failure is a :class:`ConfigError` naming it."""
    if not isinstance(spec, str) or not _SPEC_RE.fullmatch(spec):
        raise ConfigError(f"expected 'package.module:function', got {spec!r}")
    module_name, _, attribute = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except Exception as error:  # noqa: BLE001 - a module's import may raise anything
        raise ConfigError(
            f"decoder {spec!r} cannot be imported: {type(error).__name__}: {error}"
        ) from error
    if not callable(target):
        raise ConfigError(f"decoder {spec!r} is a {type(target).__name__}, not callable")
    decoder: Decoder = target
    return decoder
