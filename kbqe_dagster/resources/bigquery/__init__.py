"""BigQuery for the load coordinator and the checks, one module per part:

- ``jobs.py``: the load request, the answers and reports, the :class:`BigQueryLoads`
  interface the coordinator sees, and the load job configuration of DESIGN.md §4;
- ``google_client.py``: BigQuery's own path over ``google-cloud-bigquery``;
- ``emulator.py``: the local emulator's path, a subclass that rebuilds BigQuery's behaviour
  where the emulator differs (its gaps are behaviour of an implementation, not flags);
- ``emulator_maps.py``: the SQL by which the emulator's path turns Avro maps (DuckDB MAPs)
  into BigQuery's repeated key/value records;
- ``storage_write.py``: the Storage Write API (streams, appends at an offset, finalize,
  commit) behind the :class:`StorageWriter` interface the delivery sink sees;
- ``schema.py``: the table schema a first load carries, derived from the file's Avro schema;
- ``erasure_tables.py``: erasure's statements, subject columns and audit table (and the emulator's
  gap with BYTES array parameters);
- ``resource.py``: the Dagster resource choosing between them.

Importing one of these modules imports this package first, and a Spark task's closure imports
some of them (the delivery sink's table settings, ``jobs.py``, ``schema.py``): so the names
below are imported when first used, not here. ``resource.py`` is dagster-gcp's resource, and
importing it imports dagster-gcp, google-cloud-bigquery and, through its read client, pandas,
numpy and pyarrow: ~170 MB in each Python worker of a stage run, and in a stage run's own
process, that staged no row through them (bench/bench_stage_run.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbqe_dagster.resources.bigquery.emulator import EmulatorBigQueryLoads
    from kbqe_dagster.resources.bigquery.google_client import GoogleBigQueryLoads
    from kbqe_dagster.resources.bigquery.jobs import (
        BigQueryLoads,
        DuplicateOffsets,
        JobReport,
        LoadRequest,
        SubmitResult,
        job_labels,
        load_job_config,
    )
    from kbqe_dagster.resources.bigquery.resource import BigQueryResource
    from kbqe_dagster.resources.bigquery.storage_write import (
        AppendOutcome,
        GoogleStorageWriter,
        StorageWriter,
        StorageWriteSettings,
    )

__all__ = [
    "AppendOutcome",
    "BigQueryLoads",
    "BigQueryResource",
    "DuplicateOffsets",
    "EmulatorBigQueryLoads",
    "GoogleBigQueryLoads",
    "GoogleStorageWriter",
    "JobReport",
    "LoadRequest",
    "StorageWriteSettings",
    "StorageWriter",
    "SubmitResult",
    "job_labels",
    "load_job_config",
]

_HOMES = {
    "AppendOutcome": "storage_write",
    "BigQueryLoads": "jobs",
    "BigQueryResource": "resource",
    "DuplicateOffsets": "jobs",
    "EmulatorBigQueryLoads": "emulator",
    "GoogleBigQueryLoads": "google_client",
    "GoogleStorageWriter": "storage_write",
    "JobReport": "jobs",
    "LoadRequest": "jobs",
    "StorageWriteSettings": "storage_write",
    "StorageWriter": "storage_write",
    "SubmitResult": "jobs",
    "job_labels": "jobs",
    "load_job_config": "jobs",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value
