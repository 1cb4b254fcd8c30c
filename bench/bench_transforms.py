"""Per-record cost of ``topics[].transforms`` on the stage task's Python path (DESIGN.md §10).

Stages N framed Avro orders in-process (a stager fed with messages, no Kafka, registry or
Spark) several ways and reports messages/s of CPU time (``time.process_time``: meaningful on a
shared, loaded machine), best of ``--repeat``:

* ``plain``: no transforms — the slicing Python path (``RangeStager``), the reference;
* ``drop``: one ``drop`` — the floor of any transformed topic: fastavro decode + encode;
* ``nine``: the nine transforms of the real-stack test (constant, expression, cast, HMAC mask,
  null mask, zoned timestamp, header, rename, drop), routed by a computed field;
* ``dest1``: ``destinations`` with one static destination and nothing else — the fan-out
  step's own cost over the ``drop`` floor (core/transforms/destinations.py);
* ``dest2``: two destinations, the whole record and a projection to three fields: rates are
  messages/s, each staged twice;
* ``dest3``: a topic drop, then three destinations: the whole record, a projection in another
  order, and one with its own cast to string and constant, projected: each message staged
  three times;
* ``kernel4``: the transforms the native kernel does (core/transforms/kernel_transforms.py): a rename,
  a drop, an int cast to string, a constant;
* ``rewrite3``: what the kernel rewrites (kernel/src/rewrite.rs): an HMAC mask of ``email``,
  ``id`` read as epoch seconds converted to a timestamp-millis, and ``add`` of a header.

With the native kernel built, ``plain``, ``drop``, ``kernel4``, ``rewrite3`` and the ``dest``
cases (Avro destinations on the kernel: formats/avro_destination_kernel.py) also run through it (the
append kernel's loop, staging/native_kernel.py, over batches of 1,000 messages): the ``path``
column says which; the kernel's rate is the whole loop's, the Python path's ``add`` calls'.

    .venv/bin/python bench/bench_transforms.py [-n 20000] [--repeat 3] [--only kernel4 drop]
"""

from __future__ import annotations

import argparse
import io
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

import fastavro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kbqe_dagster.core.config.pipeline import parse_pipeline_config  # noqa: E402
from kbqe_dagster.core.protocol.offsets import OffsetRange  # noqa: E402
from kbqe_dagster.resources.kafka.clients import KafkaSettings  # noqa: E402
from kbqe_dagster.resources.schema_registry import RegisteredSchema, RegistrySettings  # noqa: E402
from kbqe_dagster.resources.staging_store import StagingLocation  # noqa: E402
from kbqe_dagster.stager_registry import stager_class  # noqa: E402
from kbqe_dagster.staging.context import StageContext  # noqa: E402
from kbqe_dagster.staging.native_kernel import NativeStaging, kernel_built  # noqa: E402
from kbqe_dagster.staging.task import stage_messages  # noqa: E402
from kbqe_dagster_tests.staging.kernel_equality import ListReader, Msg  # noqa: E402
from kbqe_dagster_tests.support.transform_specs import SCHEMA, transforms  # noqa: E402

TOPIC = "bench.orders"
STATIC = {"mode": "static", "dataset": "shop", "table": "books"}
PROJECTED = {
    "routing": {"mode": "static", "dataset": "shop", "table": "amounts"},
    "fields": ["id", "amount", "created"],
}
CASES = {
    "plain": (None, STATIC),
    "drop": ([{"drop": "debug"}], STATIC),
    "nine": (
        transforms("shop"),
        {"mode": "fields", "dataset_field": "shop", "table_field": "tableName"},
    ),
    "dest1": (None, [{"routing": STATIC}]),  # a list: topics[].destinations
    "dest2": (None, [{"routing": STATIC}, PROJECTED]),
    "dest3": (
        [{"drop": "debug"}],
        [
            {"routing": STATIC},
            {**PROJECTED, "fields": ["created", "id", "amount"]},
            {
                "routing": {"mode": "static", "dataset": "shop", "table": "contacts"},
                "transforms": [{"cast": "id", "to": "string"}, {"add": "source", "value": "kafka"}],
                "fields": ["email", "id", "source"],
            },
        ],
    ),
    "kernel4": (
        [
            {"rename": "email", "to": "contact"},
            {"drop": "debug"},
            {"cast": "id", "to": "string"},
            {"add": "source", "value": "kafka"},
        ],
        STATIC,
    ),
    "rewrite3": (
        [
            {"mask": "email", "key_env": "KBQE_TRANSFORMS_E2E_KEY"},
            {"timestamp": "id", "to": "timestamp_millis", "epoch_unit": "s"},
            {"add": "trace", "header": "trace-id"},
        ],
        STATIC,
    ),
}
KERNEL_CASES = ("plain", "drop", "kernel4", "rewrite3", "dest1", "dest2", "dest3")


class _Registry:
    def get(self, schema_id: int) -> RegisteredSchema:
        return RegisteredSchema(schema_id, "AVRO", SCHEMA)


def _messages(n: int) -> list[Msg]:
    parsed = fastavro.parse_schema(SCHEMA)
    out = []
    for i in range(n):
        body = io.BytesIO()
        fastavro.schemaless_writer(
            body,
            parsed,
            {
                "id": i,
                "kind": "Book",
                "email": f"u{i}@example.com",
                "phone": "+33 1",
                "amount": f"{i}.25",
                "created": "2024-09-13T00:30:00",
                "debug": "internal",
            },
        )
        value = b"\x00" + struct.pack(">i", 1) + body.getvalue()
        out.append(Msg(TOPIC, 0, i, value, b"k", [("trace-id", b"t")], (1, 1_726_238_205_000)))
    return out


def _rate(case: str, messages: list[Msg], native: bool = False) -> float:
    specs, routing = CASES[case]
    topic = {
        "name": TOPIC,
        "event_time": {"kafka_timestamp_fallback": True},
        ("destinations" if isinstance(routing, list) else "routing"): routing,
    }
    if specs:
        topic["transforms"] = specs
    config = parse_pipeline_config(
        {"version": 1, "topics": [topic], "allowed_destinations": ["shop.*"]}
    )
    with tempfile.TemporaryDirectory() as tmp:
        ctx = StageContext(
            KafkaSettings("127.0.0.1:9"),
            RegistrySettings("http://127.0.0.1:9"),
            StagingLocation(f"{tmp}/staging"),
            config,
            TOPIC,
            native_kernel=native,
        )
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        stager = stager_class(ctx)(ctx, OffsetRange(TOPIC, 0, 0, len(messages)), workdir)
        stager.lookup = _Registry()
        if native:
            driver = NativeStaging.for_stager(stager)
            assert driver is not None, f"{case}: the kernel does not take this topic"
            reader = ListReader(messages, 0, len(messages), 1000)
            started = time.process_time()
            stage_messages(stager, reader, driver)
            seconds = time.process_time() - started
            assert driver.kernel.messages == len(messages), dict(driver.handbacks)
        else:
            started = time.process_time()
            for msg in messages:
                stager.add(msg)
            seconds = time.process_time() - started
        assert not stager.dead_letters, stager.dead_letters
        stager.discard()
    return len(messages) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), help="a subset of cases")
    args = parser.parse_args()
    os.environ.setdefault("KBQE_TRANSFORMS_E2E_KEY", "bench-key")
    messages = _messages(args.n)
    print(f"{'case':8} {'path':6} {'messages/s':>12} {'CPU us/msg':>10}  (CPU time, best of "
          f"{args.repeat}, n={args.n:,})")  # fmt: skip
    for case in args.only or CASES:
        paths = [False] + ([True] if kernel_built() and case in KERNEL_CASES else [])
        for native in paths:
            best = max(_rate(case, messages, native) for _ in range(args.repeat))
            path = "kernel" if native else "python"
            print(f"{case:8} {path:6} {best:>12,.0f} {1e6 / best:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
