"""The load half of ``kbqe demo``: run load cycles until nothing is pending, then show the
rows that arrived per BigQuery table (and per day for the first days); returns when the loads
were done and the bytes they loaded, for the demo's freshness and cost lines."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import dagster as dg

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.demo.preflight import staging_problems
from kbqe_dagster.loading.state_file import StateFile

MAX_POLLS = 30
PROGRESS_POLLS = 5  # a "still waiting" line every this many polls


@dataclass(frozen=True)
class Loaded:
    """When the demo's load jobs were all done (``time.monotonic()``) and their input bytes."""

    at: float
    bytes_loaded: int


def load_and_report(
    defs: dg.Definitions, instance: dg.DagsterInstance, run_config: dict | None = None
) -> Loaded:
    """``run_config``: added to each in-process run's (the CLI's console logging)."""
    resources = defs.resources
    store = resources["staging"].store()
    loaded = defs.resolve_job_def("load_job").execute_in_process(
        run_config=run_config or {}, instance=instance
    )
    if not loaded.success:
        raise KbqeError("the load run failed; see `dagster dev` → Runs for its logs")
    job_bytes = _job_bytes(loaded)
    for poll in range(MAX_POLLS):
        pending = StateFile(store).read().pending_jobs()
        if not pending:
            break
        if poll and poll % PROGRESS_POLLS == 0:
            print(f"      ... waiting for {len(pending)} load job(s) ({poll} polls)", flush=True)
        time.sleep(1)
        polled = defs.resolve_job_def("poll_load_jobs_job").execute_in_process(
            run_config=run_config or {}, instance=instance
        )
        job_bytes.update(_job_bytes(polled))
    else:
        raise KbqeError(
            f"load jobs still pending after {MAX_POLLS} polls; `kbqe load plan` shows them"
        )
    done = Loaded(time.monotonic(), sum(job_bytes.values()))
    config = resources["pipeline"].load()
    dl = config.dead_letter
    datasets = {p.split(".")[0] for p in config.allowed_destinations.patterns} | {dl.dataset}
    print_table_rows(resources["bigquery"].client(), (dl.dataset, dl.table), datasets)
    # A quarantine is not a failed run, but the rows above miss those files: the demo says so
    # and exits 1 rather than look like a success.
    quarantine = staging_problems(StateFile(store).read(), None)
    if quarantine:
        for problem in quarantine:
            print(f"kbqe demo: {problem}", file=sys.stderr)
        raise KbqeError(
            f"the load quarantined files of {len(quarantine)} table(s), missing "
            "from the rows above; the fix is above"
        )
    return done


def _job_bytes(result: dg.ExecuteInProcessResult) -> dict[str, int]:
    """Input bytes per load job the run finished (reported on each day it wrote: once)."""
    out = {}
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata
        if "job_id" in meta and "job_input_bytes" in meta:
            out[str(meta["job_id"].value)] = int(meta["job_input_bytes"].value)
    return out


def print_table_rows(
    client, dead_letter: tuple[str, str], datasets: set[str] | None = None
) -> None:
    """Rows and distinct Kafka (topic, partition, offset) positions per table of ``datasets``
    (default: every dataset): equal numbers mean no duplicates arrived, also in a table that
    several topics feed (their offsets overlap, their positions never do). Tables without the
    Kafka columns (another tool's, a keyed current table) show their rows only; views are
    skipped."""
    listed = sorted(d.dataset_id for d in client.list_datasets())
    for dataset in (d for d in listed if datasets is None or d in datasets):
        for item in sorted(client.list_tables(dataset), key=lambda t: t.table_id):
            table = item.table_id
            if item.table_type == "VIEW":
                continue
            position = (
                ("topic", "partition", "offset")
                if (dataset, table) == dead_letter
                else ("_kafka_topic", "_kafka_partition", "_kafka_offset")
            )
            columns = {f.name for f in client.get_table(f"{dataset}.{table}").schema}
            if set(position) <= columns:
                key = ", ':', ".join(f"CAST(`{c}` AS STRING)" for c in position)
                row = list(
                    client.query(
                        f"SELECT COUNT(*) AS n, COUNT(DISTINCT CONCAT({key})) AS d "
                        f"FROM `{dataset}.{table}`"
                    ).result()
                )[0]
                print(
                    f"      {dataset}.{table}: {row['n']} row(s), {row['d']} distinct Kafka "
                    "position(s)"
                )
            else:
                row = list(client.query(f"SELECT COUNT(*) AS n FROM `{dataset}.{table}`").result())[
                    0
                ]
                print(f"      {dataset}.{table}: {row['n']} row(s)")
