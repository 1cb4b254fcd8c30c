"""``kbqe run --until-idle`` as a process on the whole local stack: a fresh topic with good and
bad messages is staged on Spark and loaded into the BigQuery emulator — every good message
once, every bad one in the dead-letter table — by one command that exits 0 and prints one
JSON document; its runs are in the Dagster instance. Run again with nothing new, it stages
and loads nothing and exits 0.

Isolated from other tests and engineers: a topic, staging prefix, datasets and Dagster
instance of this run only (the pipeline file and staging URL reach the command through
``KBQE_PIPELINE_CONFIG`` and ``KBQE_STAGING_URL``, as they reach the daemon's jobs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.demo.samples import (
    SampleMessage,
    bad_messages,
    placed_bad,
    placed_good,
    produce,
    register_schemas,
)
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.runner.in_process import LAUNCHED_BY, LAUNCHED_BY_TAG
from kbqe_dagster_tests.support.demo_messages import good_messages

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KBQE = str(Path(sys.executable).parent / "kbqe")
REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3


def schema_id(value: bytes) -> int:
    return int.from_bytes(value[1:5], "big")


def kbqe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [KBQE, "run", "--until-idle", *args], env=env, capture_output=True, text=True, timeout=600
    )


@dataclass(frozen=True)
class CatchUp:
    run: str
    topic: str
    placed: dict[tuple[int, int], SampleMessage]
    env: dict[str, str]
    home: Path


@pytest.fixture
def bigquery(local_stack):
    client = local_bigquery_client()
    runs: list[str] = []
    yield client, runs
    for run in runs:
        for dataset in (f"acme_sales_{run}", f"acme_web_{run}", f"dead_{run}"):
            client.delete_dataset(dataset, delete_contents=True, not_found_ok=True)


@pytest.fixture
def make_catch_up(local_endpoints, tmp_path, bigquery):
    """A topic with the messages ``choose(run, ids)`` gives, and the environment that points
    `kbqe` at it (a pipeline file, a staging prefix and a Dagster instance of its own)."""

    def make(
        choose: Callable[[str, dict[str, int]], list[SampleMessage]], **topic_overrides: Any
    ) -> CatchUp:
        run = uuid.uuid4().hex[:8]
        bigquery[1].append(run)
        topic = f"com.acme.events.idle{run}"
        admin = AdminClient({"bootstrap.servers": local_endpoints.kafka_bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[
            topic
        ].result(30)
        ids = register_schemas(local_endpoints.registry_url)
        placed = produce(local_endpoints.kafka_bootstrap, topic, choose(run, ids), PARTITIONS)
        pipeline = tmp_path / f"pipeline-{run}.yaml"
        pipeline.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "topics": [
                        {
                            "name": topic,
                            "event_time": {"fields": ["eventTime", "occurredAt"]},
                            **topic_overrides,
                        }
                    ],
                    "allowed_destinations": [f"acme_sales_{run}.*", f"acme_web_{run}.*"],
                    "dead_letter": {"dataset": f"dead_{run}", "table": "dead_letters"},
                    # Several ranges per run, and a first run that anchors each partition with one
                    # range: the catch-up needs more than one round.
                    "staging": {"max_messages_per_range": 200},
                    "load": {"max_retries": 1},
                }
            )
        )
        home = tmp_path / f"dagster_home-{run}"
        home.mkdir()
        shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
        env = {
            **os.environ,
            "KBQE_ENV": "local",
            "KBQE_PIPELINE_CONFIG": str(pipeline),
            "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/idle-{run}",
            "DAGSTER_HOME": str(home),
        }
        return CatchUp(run, topic, placed, env, home)

    return make


def orders_page_views_and_bad(run: str, ids: dict[str, int]) -> list[SampleMessage]:
    # Orders of schema v1 and v2 in one table: the catch-up loads in several rounds, so v1
    # files also arrive after a v2 load widened the table, and load by name.
    return good_messages(run, ids) + bad_messages(ids)


def test_one_command_stages_and_loads_everything_once_then_finds_nothing_to_do(
    make_catch_up, bigquery
) -> None:
    catch_up = make_catch_up(orders_page_views_and_bad)
    run, topic, placed, env, home = (
        catch_up.run,
        catch_up.topic,
        catch_up.placed,
        catch_up.env,
        catch_up.home,
    )
    client = bigquery[0]
    good, bad = placed_good(placed), placed_bad(placed)
    tables = {f"acme_sales_{run}.orders", f"acme_web_{run}.page_views"}

    first = kbqe(env, "--json")

    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads(first.stdout)  # stdout is the JSON document and nothing else
    assert report["ok"] is True and report["error"] is None
    assert report["topics"] == {
        topic: {
            "staged": len(good),
            "dead_lettered": len(bad),
            "tombstones": 1,
            "messages": len(placed),
            "stage_runs": report["topics"][topic]["stage_runs"],
        }
    }
    assert report["topics"][topic]["stage_runs"] >= 2
    assert report["rounds"] >= 3
    per_table = Counter(".".join(m.expect_table) for m in good.values())
    assert set(report["tables"]) == tables | {f"dead_{run}.dead_letters"}
    for name in tables:
        assert report["tables"][name]["rows_loaded"] == per_table[name]
        assert report["tables"][name]["keys_merged"] == 0
        assert report["tables"][name]["merge_bytes_processed"] is None
    assert report["tables"][f"dead_{run}.dead_letters"]["rows_loaded"] == len(bad)
    assert "round 1: " in first.stderr and "idle" in first.stderr

    for name in sorted(tables):
        rows = [
            tuple(r.values())
            for r in client.query_and_wait(
                f"SELECT _kafka_partition, _kafka_offset FROM `{name}` WHERE _kafka_topic = '{topic}'"
            )
        ]
        expected = {w for w, m in good.items() if ".".join(m.expect_table) == name}
        assert len(rows) == len(expected) and set(rows) == expected, name
    dead = [
        tuple(r.values())
        for r in client.query_and_wait(
            f"SELECT `partition`, `offset` FROM `dead_{run}.dead_letters`"
        )
    ]
    assert sorted(dead) == sorted(bad)

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={LAUNCHED_BY_TAG: LAUNCHED_BY}))
    assert len(runs) == report["runs"]
    assert {r.job_name for r in runs} >= {"stage_job", "load_job"}
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    assert {r.tags.get("kbqe/topic") for r in runs if r.job_name == "stage_job"} == {topic}

    again = kbqe(env, "--json")

    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads(again.stdout)
    assert second["ok"] is True and second["rounds"] == 1 and second["runs"] == 0
    assert second["topics"][topic]["staged"] == 0 and second["tables"] == {}
    for name in tables:
        count = list(client.query_and_wait(f"SELECT COUNT(*) AS n FROM `{name}`"))[0]["n"]
        assert count == per_table[name], f"{name}: the second run loaded something"

    text = kbqe(env, "--topic", topic)

    assert text.returncode == 0, text.stderr[-3000:]
    assert text.stdout.splitlines()[0].split() == [
        "topic",
        "staged",
        "dead-lettered",
        "tombstones",
        "stage",
        "runs",
    ]
    assert "nothing loaded" in text.stdout and "idle after 1 round(s)" in text.stdout


def test_a_topic_that_fails_on_bad_input_exits_non_zero_with_a_one_line_reason(
    make_catch_up, bigquery
) -> None:
    def good_then_one_bad_magic(run: str, ids: dict[str, int]) -> list[SampleMessage]:
        good = orders_page_views_and_bad(run, ids)[:30]
        bad = [m for m in bad_messages(ids) if m.expect_reason == Reason.BAD_MAGIC]
        return good[:15] + bad + good[15:]

    catch_up = make_catch_up(good_then_one_bad_magic, on_bad_input="fail")
    ((where, _),) = placed_bad(catch_up.placed).items()

    result = kbqe(catch_up.env, "--json")

    assert result.returncode == 1, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["error"].startswith(f"{catch_up.topic}: stage run ")
    assert f"{catch_up.topic}[{where[0]}] offset {where[1]}: bad_magic" in report["error"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("kbqe: error: ")]
    assert errors == [f"kbqe: error: {report['error']}"]
    assert report["topics"][catch_up.topic]["stage_runs"] == 1, "a failed topic is not retried"


def test_a_schema_upgrade_over_separate_rounds_loads_older_files_by_name(
    make_catch_up, bigquery, local_endpoints
) -> None:
    """Round 1 loads orders of schema v1; round 2 loads v2, which widens the table with
    `coupon`; round 3 brings more v1 orders from a lagging producer's partition. BigQuery
    loads them by name with a NULL coupon, and so does the local stack: nothing is
    quarantined, every order is in the table once."""

    def orders(run: str, ids: dict[str, int], version: str) -> list[SampleMessage]:
        return [
            m
            for m in good_messages(run, ids)
            if m.expect_table == (f"acme_sales_{run}", "orders")
            and schema_id(m.value) == ids[version]
        ]

    catch_up = make_catch_up(lambda run, ids: orders(run, ids, "orders_v1")[:60])
    ids = register_schemas(local_endpoints.registry_url)
    table = f"acme_sales_{catch_up.run}.orders"

    def rows(where: str = "TRUE") -> set[tuple[int, int]]:
        return {
            (r["p"], r["o"])
            for r in bigquery[0].query_and_wait(
                f"SELECT _kafka_partition AS p, _kafka_offset AS o FROM `{table}` WHERE {where}"
            )
        }

    assert kbqe(catch_up.env).returncode == 0
    assert rows() == set(catch_up.placed)

    v2 = produce(
        local_endpoints.kafka_bootstrap,
        catch_up.topic,
        orders(catch_up.run, ids, "orders_v2")[:60],
        PARTITIONS,
        only_partitions=[0, 1],
    )
    assert kbqe(catch_up.env).returncode == 0
    assert rows("coupon IS NOT NULL") == set(v2), "v2 widened the table"

    lagging = produce(
        local_endpoints.kafka_bootstrap,
        catch_up.topic,
        orders(catch_up.run, ids, "orders_v1")[60:120],
        PARTITIONS,
        only_partitions=[2],
    )
    third = kbqe(catch_up.env, "--json")

    assert third.returncode == 0, third.stderr[-3000:]
    report = json.loads(third.stdout)
    assert report["ok"] is True and report["tables"][table]["rows_loaded"] == 60
    assert rows("coupon IS NULL") == set(catch_up.placed) | set(lagging)
    assert len(rows()) == 180 and rows("coupon IS NOT NULL") == set(v2)
