"""A compacted topic becomes its current table, end to end on the local stack, with the broker as
the oracle (DESIGN.md §14): a ``cleanup.policy=compact`` topic keyed by an Avro key gets
updates, tombstones, re-creates and a key whose versions span both runs; the broker really
compacts it between the runs (read back from the beginning, it holds fewer records than were
produced, some of them never read by kbqe); after each ``kbqe run --until-idle``, ``D.T``
equals the topic read as a table (the last value per key, tombstoned keys deleted).

Cheap by construction: two ``kbqe run`` subprocesses, about twenty messages, no sleep but the
wait for the broker's cleaner (kbqe_dagster/demo/compacted.py says how the topic is made to
compact).

The native kernel stages the topic (keyed/table_native.py) where it is built: every message of
both runs, tombstones included, with nothing handed back to the Python path (the stage runs'
``stage_path`` and ``kernel_handbacks`` metadata say so). The same topic with a transform (an
hmac ``mask`` of the name) holds the masked names in ``D.T`` and its history: the topic read as
a table, masked (keyed/table_stage.py; the Python path stages such ranges)."""

from __future__ import annotations

import hmac
import json
import os
import uuid
from collections import Counter

import pytest

from kbqe_dagster.demo.compacted import CompactedTopic
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.staging.native_kernel import extension
from kbqe_dagster_tests.conftest import kernel_skip_fails
from kbqe_dagster_tests.kbqe_run import cli_env, drop_datasets, until_idle
from kbqe_dagster_tests.support.keyed_oracle import stage_run_metadata

pytestmark = [pytest.mark.integration, pytest.mark.slow]


MASK_KEY = "compacted-test-key"


def masked_name(name: str) -> str:
    return hmac.new(MASK_KEY.encode(), name.encode(), "sha256").hexdigest()


@pytest.fixture(params=["as_produced", "masked"])
def compacted(request, local_stack, local_endpoints, tmp_path):
    masked = request.param == "masked"
    run = uuid.uuid4().hex[:8]
    name, dataset, dead = f"compact{run}.shop.customers", f"compact_{run}", f"compact_dead_{run}"
    topic = CompactedTopic(local_endpoints, name)
    pipeline = {
        "version": 1,
        "topics": [{
            "name": name,
            "routing": {"mode": "static", "dataset": dataset, "table": "customers"},
            "event_time": {"fields": [], "kafka_timestamp_fallback": True},
            "keyed": {"key_from": "kafka_key", "deletes": "hard", "history": True},
        }],
        "dead_letter": {"dataset": dead, "table": "dead_letters"},
    }  # fmt: skip
    if masked:
        pipeline["topics"][0]["transforms"] = [{"mask": "name", "key_env": "KBQE_TEST_MASK_KEY"}]
    env = cli_env(tmp_path, pipeline, f"gs://{LOCAL_BUCKET}/compacted-{run}")
    env["KBQE_TEST_MASK_KEY"] = MASK_KEY
    client = local_bigquery_client()
    yield topic, dataset, env, client, (masked_name if masked else str)
    topic.delete()
    drop_datasets(client, dataset, dead)


def current_table(client, dataset: str) -> set[tuple]:
    rows = client.query(f"SELECT id, name, tier FROM `{dataset}.customers`").result()
    return {tuple(row) for row in rows}


def stage_runs(env: dict) -> tuple[set[str], int, Counter[str]]:
    """The stage runs' paths, messages and kernel hand-backs (their materializations' metadata
    in the runs' instance)."""
    paths: set[str] = set()
    messages, handbacks = 0, Counter[str]()
    for md in stage_run_metadata(env["DAGSTER_HOME"]):
        paths.add(md["stage_path"])
        messages += md["messages"]
        handbacks.update(md.get("kernel_handbacks") or {})
    return paths, messages, handbacks


def table_kernel_built() -> bool:
    """Whether ``kbqe run`` stages table topics on the kernel here: built, switched on, with
    the table routine (a kernel built before it leaves them to the Python path)."""
    built = extension()
    return built is not None and hasattr(built.StageKernel, "add_table_layout")


def test_a_compacted_topic_is_its_current_table_before_and_after_the_broker_compacts(
    compacted,
) -> None:
    topic, dataset, env, client, name_of = compacted

    def as_table() -> set[tuple]:  # the topic read as a table, its names as staged
        return {(id_, name_of(name), tier) for id_, name, tier in topic.as_table()}

    # Run 1: creates, updates, a delete, a key created and deleted.
    for id_ in range(1, 7):
        topic.put(id_, f"c{id_}")
    topic.put(2, "c2 v2", "gold")
    topic.put(2, "c2 v3", "gold")
    topic.put(3, None)
    topic.put(7, "c7")
    topic.put(7, None)
    until_idle(env)
    assert current_table(client, dataset) == as_table() != set()

    before = topic.produced
    # Run 2: key 1's versions span both runs, key 3 and key 7 are re-created, key 5 is
    # deleted, key 6 changes three times (the broker keeps only the last), a new key.
    topic.put(1, "c1 v2", "silver")
    topic.put(3, "c3 again")
    topic.put(7, "c7 again", "gold")
    topic.put(5, None)
    for version in range(2, 5):
        topic.put(6, f"c6 v{version}")
    topic.put(8, "c8")
    topic.put(1, "c1 v3", "gold")
    topic.seal()
    produced = topic.produced - before
    left = topic.wait_for_compaction({(6, "c6 v2"), (6, "c6 v3"), (1, "c1 v2")})
    assert left < topic.produced
    report = json.loads(until_idle(env).stdout)
    # Run 2 read a compacted topic: values it never saw were gone before it ran.
    assert report["topics"][topic.name]["messages"] < produced
    table = as_table()
    assert current_table(client, dataset) == table
    assert {row[0] for row in table} == {1, 2, 3, 4, 6, 7, 8, 1000, 1001}

    # The history: a tombstone closes its key's version and is the key's current, deleted,
    # version until the key is written again (key 3: the broker may have compacted its first
    # value away before kbqe read it; the history holds what Kafka delivered).
    history = client.query(
        f"SELECT id, name, _deleted, _is_current FROM `{dataset}.customers_history` "
        "WHERE id IN (3, 5)"
    ).result()
    versions = {(r["id"], r["name"], r["_deleted"], r["_is_current"]) for r in history}
    c5, c3 = name_of("c5"), name_of("c3 again")
    assert {(5, c5, False, False), (5, c5, True, True)} <= versions
    assert {v[:3] for v in versions if v[3]} == {(3, c3, False), (5, c5, True)}

    # The kernel's share: every message both runs read, tombstones included, and nothing
    # handed back to the Python path.
    paths, messages, handbacks = stage_runs(env)
    assert messages > 0
    if name_of is not str:  # transforms: the Python path's (keyed/table_native.py)
        assert paths == {"python"}
    elif table_kernel_built():
        print(f"kernel share: {messages - sum(handbacks.values())}/{messages} messages")
        assert (paths, dict(handbacks)) == ({"native"}, {})
    elif kernel_skip_fails(reason := "the native kernel with table topics is not built"):
        pytest.fail(f"KBQE_REQUIRE_KERNEL=1: {reason} ({os.environ.get('KBQE_STAGE_KERNEL')=})")
