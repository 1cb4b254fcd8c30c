"""Debezium on Postgres into BigQuery, on the local stack, in one command (from the
repository root):

    .venv/bin/python -m examples.debezium_postgres.run [--changes 50] [--encoding avro|json]

Starts the local stack with its on-demand Postgres and Kafka Connect (idempotent), creates the
table ``inventory.customers`` with sample rows on the first run, registers the Debezium
connector of ``connector.json`` (it snapshots the table, then streams its changes), makes
``--changes`` random inserts, updates and deletes in Postgres, runs ``kbqe run --until-idle``
with ``pipeline.yaml`` and prints ``inventory.customers`` and one customer's history, then
whether the live rows equal ``SELECT *`` in Postgres. Run it again: more changes, the same
equality.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PIPELINE = HERE / "pipeline.yaml"
CONNECTOR = json.loads((HERE / "connector.json").read_text())
TOPIC = "pg.inventory.customers"
TABLE = "inventory.customers"
STAGING_URL = "gs://kbqe-local/debezium-postgres-example"
COLUMNS = ("id", "first_name", "last_name", "email", "birthday", "balance", "signed_up", "profile")

SCHEMA_SQL = f"""
CREATE SCHEMA IF NOT EXISTS inventory;
CREATE TABLE IF NOT EXISTS {TABLE} (
    id         serial PRIMARY KEY,
    first_name text NOT NULL,
    last_name  text NOT NULL,
    email      text,
    birthday   date,
    balance    numeric(12, 2),
    signed_up  timestamptz NOT NULL DEFAULT now(),
    profile    jsonb
);
"""
FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken"]
LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.debezium_postgres.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--changes", type=int, default=50, help="changes per run (default 50)")
    parser.add_argument(
        "--encoding",
        choices=("avro", "json"),
        default="avro",
        help="the connector's converter on its first run: Apicurio's Avro (default) or "
        "Connect's JsonConverter with schemas",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("KBQE_ENV", "local")
    import psycopg

    from kbqe_dagster.localstack import stack
    from kbqe_dagster.localstack.cdc import ConnectClient, json_converter
    from kbqe_dagster.localstack.endpoints import local_endpoints

    endpoints = local_endpoints()
    print("1/4 local stack with Postgres and Kafka Connect ...", flush=True)
    stack.up()
    stack.up(["postgres", "connect"])
    conninfo = f"host=127.0.0.1 port={endpoints.postgres_port} user=kbqe password=kbqe dbname=kbqe"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SCHEMA_SQL)
        (rows,) = conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone() or (0,)
        if rows == 0:
            insert(conn, random.Random(1), 20)
            print(f"      created {TABLE} with 20 customers")

        print(f"2/4 Debezium connector {CONNECTOR['name']} ...", flush=True)
        connect = ConnectClient(endpoints.connect_url)
        if CONNECTOR["name"] not in connect.names():
            config = dict(CONNECTOR["config"])
            config["database.port"] = str(endpoints.postgres_port)
            registry = f"http://127.0.0.1:{endpoints.registry_port}/apis/registry/v2"
            for side in ("key", "value"):
                config[f"{side}.converter.apicurio.registry.url"] = registry
            if args.encoding == "json":
                config = {k: v for k, v in config.items() if ".converter" not in k}
                config |= json_converter("key") | json_converter("value")
            connect.put(CONNECTOR["name"], config)
        connect.wait_running(CONNECTOR["name"])

        print(f"3/4 {args.changes} changes in Postgres ...", flush=True)
        change(conn, random.Random(time.time_ns()), args.changes)
        source = {
            r[0]: r for r in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE}").fetchall()
        }
    settle(endpoints.kafka_bootstrap)

    print("4/4 kbqe run --until-idle (stage on Spark, load, MERGE) ...", flush=True)
    env = {
        **os.environ,
        "KBQE_PIPELINE_CONFIG": str(PIPELINE),
        "KBQE_STAGING_URL": STAGING_URL,
        "DAGSTER_HOME": str(dagster_home()),
    }
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kbqe"), "run", "--until-idle", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    topic = report.get("topics", {}).get(TOPIC, {})
    print(
        f"      {topic.get('staged', 0)} change(s) staged, {topic.get('dead_lettered', 0)} "
        f"dead-lettered, {topic.get('tombstones', 0)} tombstone(s) in "
        f"{time.monotonic() - started:.0f}s (Spark start included)"
    )
    if done.returncode != 0:
        print("the run did not finish; see the lines above", file=sys.stderr)
        return done.returncode
    return show(source)


def dagster_home() -> Path:
    from kbqe_dagster.resources.environment import local_dagster_home

    return local_dagster_home()


def insert(conn: Any, rng: random.Random, count: int) -> None:
    for _ in range(count):
        conn.execute(
            f"INSERT INTO {TABLE} (first_name, last_name, email, birthday, balance, profile) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (
                rng.choice(FIRST),
                rng.choice(LAST),
                f"user{rng.randrange(10**6)}@example.com",
                f"19{rng.randint(50, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                Decimal(rng.randint(-(10**6), 10**7)) / 100,
                json.dumps({"tier": rng.choice(["free", "pro"]), "tags": ["cdc"]}),
            ),
        )


def change(conn: Any, rng: random.Random, count: int) -> None:
    """Inserts, updates and deletes, one transaction each, as an application makes them."""
    for _ in range(count):
        ids = [r[0] for r in conn.execute(f"SELECT id FROM {TABLE}").fetchall()]
        roll = rng.random()
        if roll < 0.4 or len(ids) < 5:
            insert(conn, rng, 1)
        elif roll < 0.85:
            conn.execute(
                f"UPDATE {TABLE} SET balance = balance + %s, email = %s WHERE id = %s",
                (Decimal(rng.randint(1, 9999)) / 100, f"new{rng.randrange(10**6)}@example.com",
                 rng.choice(ids)),
            )  # fmt: skip
        else:
            conn.execute(f"DELETE FROM {TABLE} WHERE id = %s", (rng.choice(ids),))


def settle(bootstrap: str, quiet: float = 3.0, timeout: float = 120.0) -> None:
    """Wait until the topic has not grown for ``quiet`` seconds: Debezium delivered the
    committed changes."""
    from confluent_kafka import Consumer, TopicPartition

    from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kbqe-example-probe",
                         "logger": CLIENT_LOG})  # fmt: skip
    try:
        last, since, deadline = -1, time.monotonic(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            meta = consumer.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
            parts = [] if meta is None or meta.error else list(meta.partitions)
            end = sum(
                consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                for p in parts
            )
            if end != last:
                last, since = end, time.monotonic()
            elif end > 0 and time.monotonic() - since >= quiet:
                return
            time.sleep(0.5)
    finally:
        consumer.close()


def show(source: dict[int, tuple]) -> int:
    from kbqe_dagster.localstack.clients import local_bigquery_client

    client = local_bigquery_client()
    rows = {
        r["id"]: r
        for r in client.query_and_wait(
            f"SELECT {', '.join(COLUMNS)}, _op, _deleted FROM `{TABLE}` ORDER BY id"
        )
    }
    live = {i: r for i, r in rows.items() if not r["_deleted"]}
    print(f"{TABLE}: {len(live)} live customer(s), {len(rows) - len(live)} deleted (soft)")
    for r in list(live.values())[:5]:
        print(
            f"      {r['id']:>4} {r['first_name']} {r['last_name']:<10} birthday "
            f"{r['birthday']} balance {r['balance']} signed up {r['signed_up']:%Y-%m-%d %H:%M}Z "
            f"profile {json.dumps(r['profile']) if not isinstance(r['profile'], str) else r['profile']}"
        )
    if live:
        key = max(live, key=lambda i: i)
        print(f"{TABLE}_history of customer {key}:")
        for h in client.query_and_wait(
            f"SELECT _op, balance, email, _valid_from, _valid_to, _is_current "
            f"FROM `{TABLE}_history` WHERE id = {key} ORDER BY _valid_from"
        ):
            print(
                f"      {h['_op']} balance {h['balance']} {h['email']} valid "
                f"{h['_valid_from']:%H:%M:%S.%f} .. {h['_valid_to']:%Y-%m-%d %H:%M:%S}"
                f"{'  (current)' if h['_is_current'] else ''}"
            )
    same = sorted(live) == sorted(source) and all(
        (live[i]["email"], live[i]["balance"]) == (source[i][3], source[i][5]) for i in source
    )
    print(f"the live rows equal SELECT * in Postgres: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
