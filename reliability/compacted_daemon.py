"""A compacted topic under the Dagster daemon: changes produced while ``kbqe dev`` runs, the
broker compacting as it goes, and ``D.T`` compared with the topic read as a table once the
sensors, load cycles and merge schedule have caught up (issue 38: "once under the daemon").

    .venv/bin/python -m reliability.compacted_daemon [--seconds 60] [--wait 600] [--mask-name]

Needs the local stack. Creates a compacted topic keyed by an Avro key
(kbqe_dagster/demo/compacted.py), writes a pipeline with short cadences (``key_from:
kafka_key``, hard deletes, history), starts ``kbqe dev`` on a Dagster home of its own, makes
changes for ``--seconds`` (updates, tombstones, re-creates of 12 keys), seals the segments and
waits for the broker to compact them, then waits until the rows of ``D.T`` equal the topic
read back from the beginning as a table (exit 0) or the wait times out (exit 1, with the
differences). Stops ``kbqe dev``, deletes the topic and the datasets at the end.
``--mask-name`` gives the topic a transform, an hmac ``mask`` of the name: ``D.T`` must then
equal the topic read as a table with its names masked.
"""

from __future__ import annotations

import argparse
import hmac
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from kbqe_dagster.demo.compacted import CompactedTopic
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import local_endpoints
from reliability import kbqe_dev

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to make changes")
    parser.add_argument("--wait", type=float, default=600.0, help="catch-up timeout (s)")
    parser.add_argument("--port", type=int, default=3138, help="kbqe dev's web port")
    parser.add_argument("--mask-name", action="store_true", help="hmac-mask the name column")
    args = parser.parse_args(argv)
    mask_key = "compacted-daemon-key"

    def name_of(name: str) -> str:
        if not args.mask_name:
            return name
        return hmac.new(mask_key.encode(), name.encode(), "sha256").hexdigest()

    run = uuid.uuid4().hex[:8]
    name, dataset = f"compactd{run}.shop.customers", f"compactd_{run}"
    topic = CompactedTopic(local_endpoints(), name)
    work = Path(tempfile.mkdtemp(prefix="kbqe-compacted-daemon-"))
    config = {
        "version": 1,
        "topics": [{
            "name": name,
            "routing": {"mode": "static", "dataset": dataset, "table": "customers"},
            "event_time": {"fields": [], "kafka_timestamp_fallback": True},
            "keyed": {"key_from": "kafka_key", "deletes": "hard", "history": True},
        }],
        "dead_letter": {"dataset": f"{dataset}_dead", "table": "dead_letters"},
        "staging": {"allowed_latency": "10s"},
        "load": {"cadence": "2m", "poll_interval": "20s"},
    }  # fmt: skip
    if args.mask_name:
        config["topics"][0]["transforms"] = [{"mask": "name", "key_env": "KBQE_DEMO_MASK_KEY"}]
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
        "KBQE_DEMO_MASK_KEY": mask_key,
    }
    dev = kbqe_dev.start(env, work, args.port, cwd=REPO)
    print(f"kbqe dev (pid {dev.pid}, log {work / 'kbqe-dev.log'}) on topic {name}", flush=True)
    client = local_bigquery_client()
    started = time.monotonic()
    rng = random.Random(run)
    try:
        live: dict[int, int] = {}
        while time.monotonic() - started < args.seconds:
            for _ in range(4):
                key = rng.randrange(12)
                if key in live and rng.random() < 0.25:
                    topic.put(key, None)  # a delete
                    del live[key]
                else:  # a create, an update or a re-create
                    live[key] = live.get(key, 0) + 1
                    topic.put(key, f"c{key} v{live[key]}", rng.choice([None, "gold"]))
            time.sleep(1.0)
        topic.seal()
        left = _compacted(topic)
        print(f"produced {topic.produced}, {left} left after compaction; waiting for the daemon",
              flush=True)  # fmt: skip
        want = {(id_, name_of(name), tier) for id_, name, tier in topic.as_table()}
        deadline = time.monotonic() + args.wait
        found = "not compared yet"
        while time.monotonic() < deadline:
            try:
                rows = client.query_and_wait(f"SELECT id, name, tier FROM `{dataset}.customers`")
                table = {tuple(r) for r in rows}
            except Exception as err:  # noqa: BLE001 - the table may not exist yet
                found = f"not queryable yet: {str(err)[:120]}"
                time.sleep(10)
                continue
            if table == want:
                print(
                    f"equal to the topic read as a table: {len(table)} rows, "
                    f"{time.monotonic() - started:.0f}s after the first change", flush=True
                )  # fmt: skip
                return 0
            found = (
                f"only in the topic: {sorted(want - table)}; only in D.T: {sorted(table - want)}"
            )
            time.sleep(10)
        print(f"NOT equal after the wait: {found}", flush=True)
        return 1
    finally:
        kbqe_dev.stop(dev)
        topic.delete()
        for name_ in (dataset, f"{dataset}_dead"):
            client.delete_dataset(name_, delete_contents=True, not_found_ok=True)


def _compacted(topic: CompactedTopic, timeout: float = 120.0) -> int:
    """Waits until the broker's cleaner has removed some record; how many are left."""
    deadline = time.monotonic() + timeout
    while (left := len(topic.read_back())) >= topic.produced:
        if time.monotonic() > deadline:
            raise SystemExit(f"{topic.name}: not compacted in {timeout:.0f}s")
        time.sleep(2)
    return left


if __name__ == "__main__":
    sys.exit(main())
