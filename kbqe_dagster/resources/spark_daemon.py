"""The PySpark worker daemon of a stage run: PySpark's own daemon, with the stage worker's
modules imported once before it forks.

PySpark starts one daemon per executor (``pyspark.daemon``) and forks every Python worker
from it; each worker then imports what its task needs: ``pyspark.worker``, and for a stage
task ``kbqe_dagster.staging.task`` with confluent-kafka, fastavro, the registry client
(authlib, httpx) and the native kernel, some 60 MB of Python objects. Imported after the
fork, those pages are private to each worker; imported here, before it, the workers share
them copy-on-write with the daemon and with each other. ``gc.freeze()`` then keeps the
collector (which the daemon runs in every reused worker after each task) from writing to
the headers of those objects, which would copy their pages one by one.

Selected by ``spark.python.daemon.module`` (resources/spark.py); Spark runs
``python -m kbqe_dagster.resources.spark_daemon pyspark.worker`` and talks to it exactly as
to ``pyspark.daemon``, whose ``manager()`` does all the work.

What is imported here must start no thread, open no socket and create no client: a fork
copies only the forking thread, and a librdkafka client or an open connection would be
shared by every worker. Importing these modules does none of that (librdkafka starts its
threads when a client is created; kbqe_dagster_tests/resources/test_spark_daemon.py checks
that the process still has one thread after :func:`preload`).
"""

from __future__ import annotations

import gc
import importlib

PRELOADED = ("pyspark.worker", "kbqe_dagster.staging.task")
"""PySpark's worker loop and the stage task, which imports the rest of the append path.
Topic formats with stagers of their own (keyed, JSON, Protobuf, decoders) are imported
lazily by the task, in the worker, only by runs that have such topics."""


def preload() -> None:
    for module in PRELOADED:
        importlib.import_module(module)
    _preload_registry_transport()
    # Everything imported so far lives as long as the daemon: the collector never needs to
    # look at it again, and not looking keeps its pages shared with the forked workers.
    gc.collect()
    gc.freeze()


def _preload_registry_transport() -> None:
    """The HTTP transport of the schema registry client — httpcore and h11, under the httpx
    flavour confluent-kafka picked — which httpx imports only when the first client is built:
    each worker's first schema lookup of every run imported it (~0.1 s of CPU per worker
    without bytecode caches, a fixed cost of every Avro, Debezium, Protobuf and JSON Schema
    run; issue 26). Imported here, the workers share it. An optimisation only: whatever goes
    wrong leaves it to the first lookup, as before."""
    try:
        compat = importlib.import_module("confluent_kafka.schema_registry.common._httpx_compat")
        importlib.import_module(compat.httpx.__name__.replace("httpx", "httpcore", 1))
    except Exception:  # noqa: BLE001, S110 - not preloaded: imported by the first lookup
        pass


def main() -> None:
    preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
