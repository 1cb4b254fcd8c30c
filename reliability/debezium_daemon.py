"""The Postgres oracle under the Dagster daemon: Debezium changes streamed while ``kbqe dev``
runs, and the current table compared with Postgres once the sensors, load cycles and merge
schedule have caught up (issue 37: "run it once under kbqe dev").

    .venv/bin/python -m reliability.debezium_daemon [--seconds 90] [--encoding avro|json]

Needs the local stack with its on-demand services (``kbqe stack up postgres connect``).
Creates a schema of its own in Postgres with the oracle's table (every mapped type, a TOASTed
text), registers a Debezium connector, writes a pipeline with short cadences, starts ``kbqe
dev`` on a Dagster home of its own, makes changes for ``--seconds`` (inserts, updates that
leave the TOASTed column alone, deletes, a primary-key update), then waits until
``SELECT *`` equals the live rows of ``D.T`` (exit 0) or the wait times out (exit 1, with the
differences). Stops ``kbqe dev`` and removes its connector and schema at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import yaml

from kbqe_dagster.localstack.cdc import ConnectClient, debezium_postgres_config
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import local_endpoints
from kbqe_dagster.localstack.postgres import DATABASE, PASSWORD, USER
from reliability import kbqe_dev
from reliability.postgres_oracle import Source, differences, drop_slot_when_released, pipeline

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="how long to make changes")
    parser.add_argument("--encoding", choices=("avro", "json"), default="avro")
    parser.add_argument("--wait", type=float, default=600.0, help="catch-up timeout (s)")
    parser.add_argument("--port", type=int, default=3111, help="kbqe dev's web port")
    args = parser.parse_args(argv)

    endpoints = local_endpoints()
    run = uuid.uuid4().hex[:8]
    schema, prefix, dataset = f"daemon_{run}", f"daemon_{run}", f"pg_daemon_{run}"
    topic = f"{prefix}.{schema}.items"
    conn = psycopg.connect(
        f"host=127.0.0.1 port={endpoints.postgres_port} user={USER} password={PASSWORD} "
        f"dbname={DATABASE}",
        autocommit=True,
    )
    source = Source(conn, schema, seed=int(time.time()))
    source.create()
    source.insert(25, nulls_every=9)
    connect = ConnectClient(endpoints.connect_url)
    connector = f"daemon-{run}"
    connect.put(
        connector,
        debezium_postgres_config(
            endpoints, prefix, prefix, [source.qualified], args.encoding,
            {"skipped.operations": "none"},
        ),
    )  # fmt: skip
    connect.wait_running(connector)

    work = Path(tempfile.mkdtemp(prefix="kbqe-daemon-oracle-"))
    config = pipeline(
        topic,
        dataset,
        staging={"allowed_latency": "10s"},
        load={"cadence": "2m", "poll_interval": "20s"},
    )
    (work / "pipeline.yaml").write_text(yaml.safe_dump(config))
    home = work / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(work / "pipeline.yaml"),
        "KBQE_STAGING_URL": str(work / "staging"),
        "DAGSTER_HOME": str(home),
    }
    dev = kbqe_dev.start(env, work, args.port, cwd=REPO)
    print(f"kbqe dev (pid {dev.pid}, log {work / 'kbqe-dev.log'}) on topic {topic}", flush=True)
    client = local_bigquery_client()
    started = time.monotonic()
    try:
        changes = 0
        while time.monotonic() - started < args.seconds:
            ids = source.live_ids()
            source.insert(3)
            source.update(ids[:4])
            source.sql(f"DELETE FROM {source.qualified} WHERE id = %s", (ids[-1],))
            changes += 8
            if changes % 80 == 0:
                source.sql(f"UPDATE {source.qualified} SET id = id + 1000000 WHERE id = %s",
                           (ids[0],))  # fmt: skip
            time.sleep(1.0)
        print(f"made about {changes} changes in {args.seconds:.0f}s; waiting for the daemon",
              flush=True)  # fmt: skip
        want = source.rows()
        deadline = time.monotonic() + args.wait
        found: list[str] = ["not compared yet"]
        while time.monotonic() < deadline:
            try:
                rows = client.query_and_wait(f"SELECT * FROM `{dataset}.items` WHERE NOT _deleted")
                table = {r["id"]: dict(r.items()) for r in rows}
            except Exception as err:  # noqa: BLE001 - the table may not exist yet
                found = [f"not queryable yet: {str(err)[:120]}"]
                time.sleep(10)
                continue
            found = differences(want, table)
            if not found:
                print(
                    f"equal to Postgres: {len(table)} live rows, "
                    f"{time.monotonic() - started:.0f}s after the first change", flush=True
                )  # fmt: skip
                return 0
            time.sleep(10)
        print("NOT equal after the wait:\n  " + "\n  ".join(found[:30]), flush=True)
        return 1
    finally:
        # The connector and its slot first: an interrupt while kbqe dev stops must not leave
        # a slot holding WAL (and one of max_replication_slots) behind.
        connect.delete(connector)
        connect.wait_deleted(connector)
        drop_slot_when_released(conn, prefix)
        kbqe_dev.stop(dev)
        conn.execute(f"DROP PUBLICATION IF EXISTS {prefix}_publication")
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
