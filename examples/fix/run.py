"""The FIX 4.4 example end to end on the local stack, in one command (from the repository root):

    .venv/bin/python -m examples.fix.run [--orders 1000]

Starts the local stack (idempotent), produces an order flow of FIX messages (each order a
NewOrderSingle, an ExecutionReport acknowledging it and one filling it) plus one message of
every kind the decoder refuses to the topic ``fix.orders``, runs ``kbqe run --until-idle``
with ``examples/fix/pipeline.yaml`` (Spark stage job with the decoder, load jobs into the
BigQuery emulator), then prints the rows per table and the dead letters per reason. Run it
again and it adds another flow: the tables grow by exactly the new messages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PIPELINE = HERE / "pipeline.yaml"
TOPIC = "fix.orders"
DATASET, DEAD_LETTERS = "fix", "fix_dead_letters.dead_letters"
STAGING_URL = "gs://kbqe-local/fix-example"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.fix.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--orders",
        type=int,
        default=1_000,
        help="orders to produce (three FIX messages each; default 1000)",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("KBQE_ENV", "local")
    from kbqe_dagster.localstack import stack
    from kbqe_dagster.localstack.clients import local_bigquery_client
    from kbqe_dagster.localstack.endpoints import local_endpoints
    from kbqe_dagster.resources.environment import local_dagster_home as dagster_home

    print("1/3 local stack ...", flush=True)
    stack.up()
    print(
        f"2/3 producing {args.orders} orders ({3 * args.orders} FIX messages) and the bad "
        f"samples to {TOPIC} ...",
        flush=True,
    )
    produced = produce(local_endpoints().kafka_bootstrap, args.orders, seed=int(time.time()))
    for kind, n in sorted(produced.items()):
        print(f"      {kind}: {n}")

    print("3/3 kbqe run --until-idle (stage on Spark with the decoder, load) ...", flush=True)
    env = {
        **os.environ,
        "KBQE_PIPELINE_CONFIG": str(PIPELINE),
        "KBQE_STAGING_URL": STAGING_URL,
        "DAGSTER_HOME": str(dagster_home()),
        # The decoder is imported by the code location and by every Spark stage task.
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    started = time.monotonic()
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "kbqe"),
            "run",
            "--until-idle",
            "--json",
            "--topic",
            TOPIC,
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    seconds = time.monotonic() - started
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    topic = report.get("topics", {}).get(TOPIC, {})
    print(
        f"      this run: {topic.get('messages', 0)} message(s), {topic.get('staged', 0)} "
        f"staged, {topic.get('dead_lettered', 0)} dead-lettered in {seconds:.0f}s "
        "(Spark start included)"
    )
    if done.returncode != 0:
        print("the run did not finish; see the lines above", file=sys.stderr)
        return done.returncode

    client = local_bigquery_client()
    print("rows per table:")
    for table in ("new_order_single", "execution_report", "fills_by_symbol"):
        [row] = client.query(f"SELECT COUNT(*) AS n FROM `{DATASET}.{table}`").result()
        print(f"      {DATASET}.{table}: {row['n']}")
    print(f"dead letters ({DEAD_LETTERS}) per reason:")
    for row in client.query(
        f"SELECT reason, COUNT(*) AS n FROM `{DEAD_LETTERS}` GROUP BY reason ORDER BY reason"
    ).result():
        print(f"      {row['reason']}: {row['n']}")
    print("the latest ones:")
    for row in client.query(
        f"SELECT reason, error FROM `{DEAD_LETTERS}` ORDER BY staged_at DESC, `offset` DESC LIMIT 7"
    ).result():
        print(f"      {row['reason']}: {row['error']}")
    return 0


def produce(bootstrap: str, orders: int, seed: int) -> dict[str, int]:
    """The order flow and the bad samples on ``fix.orders`` (created with 3 partitions when
    missing); each order's messages share a key (its ClOrdID), so they stay in order."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from examples.fix.messages import bad_messages, order_flow
    from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    if TOPIC not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[
            TOPIC
        ].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG, "linger.ms": 20})
    counts: dict[str, int] = {}
    for n, sample in enumerate(order_flow(orders, seed=seed)):
        producer.produce(TOPIC, sample.value, key=f"order-{seed}-{n // 3}".encode())
        name = {"D": "NewOrderSingle (35=D)", "8": "ExecutionReport (35=8)"}[sample.msg_type]
        counts[name] = counts.get(name, 0) + 1
        producer.poll(0)
    for sample in bad_messages():
        producer.produce(TOPIC, sample.value, key=b"bad")
        counts["bad (decoder rejects)"] = counts.get("bad (decoder rejects)", 0) + 1
    if producer.flush(60):
        raise RuntimeError(f"could not deliver every FIX message to {TOPIC}")
    return counts


if __name__ == "__main__":
    sys.exit(main())
