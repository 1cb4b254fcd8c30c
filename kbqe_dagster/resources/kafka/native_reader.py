"""The native stage kernel's Kafka reader: one range read by librdkafka from Rust.

confluent-kafka's ``consume()`` builds a Python ``Message`` per message, which costs more than
everything the native kernel does with it (``bench/bench_stage.py``'s breakdown). When the
kernel stages a range, :class:`NativeRangeReader` reads it through the extension's
``NativeConsumer`` instead: the same librdkafka library that confluent-kafka ships and has
loaded, the same consumer settings (:func:`~kbqe_dagster.resources.kafka.clients.consumer_config`),
batches kept as librdkafka's own messages for the kernel to stage from. Only a message the
kernel hands back becomes a Python object, a :class:`ConsumedMessage` with confluent-kafka's
accessors, so the Python path treats it exactly as it treats a consumed ``Message``.

The range rules (events, the end, the position reached) are :class:`RangeReader`'s, unchanged:
this reader only swaps where the batches come from. It is not used, and the confluent-kafka
reader is, when the extension is not built, when ``KBQE_NATIVE_CONSUMER=off`` where the run
starts, when librdkafka is not the wheel's bundled library, or when the settings hold a Python
callback (an OAuth token callback, say) that only confluent-kafka can call.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from kbqe_dagster.resources.kafka.clients import (
    CLIENT_LOG,
    KafkaReadError,
    KafkaSettings,
    consumer_config,
)
from kbqe_dagster.resources.kafka.range_reader import RangeReader

log = logging.getLogger(__name__)

SWITCH = "KBQE_NATIVE_CONSUMER"
"""``off`` keeps confluent-kafka's reader under the native kernel (to compare the two)."""

try:  # the optional extension
    import kbqe_dagster_kernel as _extension
except ImportError:  # pragma: no cover - depends on the build
    _extension = None

# confluent-kafka's own settings, not librdkafka's: they never reach the C library.
_PYTHON_ONLY = (
    "logger",
    "error_cb",
    "throttle_cb",
    "stats_cb",
    "oauth_cb",
    "on_commit",
    "on_delivery",
)


def native_consumer_switch_on() -> bool:
    """The ``KBQE_NATIVE_CONSUMER`` switch where a stage run starts (tasks follow it)."""
    return os.environ.get(SWITCH, "").strip().lower() not in ("off", "0", "false", "no")


def librdkafka_path() -> str | None:
    """The librdkafka that the confluent-kafka wheel ships (and its module has loaded)."""
    import confluent_kafka

    package = Path(confluent_kafka.__file__).resolve().parent
    for libs in (package.parent / "confluent_kafka.libs", package / ".dylibs"):
        found = sorted(libs.glob("librdkafka*")) if libs.is_dir() else []
        if found:
            return str(found[0])
    return None


def native_settings(settings: KafkaSettings) -> list[tuple[str, str]] | None:
    """The range consumer's settings as librdkafka strings; None when one of them only
    confluent-kafka can apply (a Python callback)."""
    pairs = []
    for name, value in consumer_config(settings).items():
        if name == "logger":
            continue  # the native consumer keeps librdkafka's lines for CLIENT_LOG itself
        if name in _PYTHON_ONLY or callable(value):
            return None
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif not isinstance(value, (str, int, float)):
            return None
        pairs.append((name, str(value)))
    return pairs


def native_range_reader(settings: KafkaSettings, topic: str, partition: int, start: int,
                        end_exclusive: int) -> RangeReader | None:  # fmt: skip
    """A :class:`NativeRangeReader`, or None when the native consumer cannot read it."""
    if _extension is None or not hasattr(_extension, "NativeConsumer"):
        return None
    library, config = librdkafka_path(), native_settings(settings)
    if library is None or config is None:
        return None
    return NativeRangeReader(settings, topic, partition, start, end_exclusive, library=library,
                             config=config)  # fmt: skip


class NativeRangeReader(RangeReader):
    """:class:`RangeReader` whose batches come from the extension's native consumer."""

    native = True

    def __init__(
        self, *args: Any, library: str, config: list[tuple[str, str]], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.library, self.native_config = library, config

    def _open(self) -> _NativeSource:
        return _NativeSource(self)


class _NativeSource:
    def __init__(self, reader: NativeRangeReader) -> None:
        self.where = f"{reader.topic}[{reader.partition}]"
        try:
            self.consumer = _extension.NativeConsumer(reader.library, reader.native_config,
                                                      reader.topic, reader.partition, reader.position)  # fmt: skip
        except (RuntimeError, ValueError) as error:
            _forward_log_lines()
            raise KafkaReadError(
                f"reading {self.where} from offset {reader.position}: {error}"
            ) from None

    def consume(self, count: int, timeout: float) -> NativeBatchView:
        try:
            batch = self.consumer.consume(count, int(timeout * 1000))
        except RuntimeError as error:
            raise KafkaReadError(f"reading {self.where}: {error}") from None
        finally:
            _forward_log_lines()
        return NativeBatchView(batch)

    def position(self, fallback: int) -> int:
        position = self.consumer.position()
        return fallback if position is None else position

    def close(self) -> None:
        self.consumer.close()
        _forward_log_lines()


class NativeBatchView(Sequence["ConsumedMessage"]):
    """One native batch as the stage loops see a consumed batch; ``raw`` is what the kernel
    stages from, and a message becomes a Python object only when it is indexed."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return ConsumedMessage(*self.raw.message(i))


class ConsumedMessage:
    """A message of the native consumer with confluent-kafka ``Message``'s accessors (the
    ones the stage path uses), so the Python path stages it as it stages a ``Message``."""

    __slots__ = (
        "_error",
        "_topic",
        "_partition",
        "_offset",
        "_value",
        "_key",
        "_timestamp",
        "_headers",
    )

    def __init__(self, code: int | None, text: str, topic: str, partition: int, offset: int,
                 value: bytes | None, key: bytes | None, timestamp: tuple[int, int],
                 headers: list[tuple[str, bytes | None]] | None) -> None:  # fmt: skip
        self._error = None if code is None else KafkaError(code, text)
        self._topic, self._partition, self._offset = topic, partition, offset
        self._value, self._key, self._timestamp, self._headers = value, key, timestamp, headers

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers


def _forward_log_lines() -> None:
    """librdkafka's warnings and errors of native consumers, to the Kafka clients' logger."""
    for level, line in _extension.take_kafka_log_lines():
        CLIENT_LOG.log(logging.ERROR if level <= 3 else logging.WARNING, "librdkafka: %s", line)
