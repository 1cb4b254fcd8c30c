"""A real Dagster run of the ``staging`` asset stores and prints no credentials.

The run uses the resources as production configures them — secrets through ``dg.EnvVar`` —
against the real local Kafka (SASL settings configured; the PLAINTEXT listener ignores them)
and an Apicurio that requires basic auth, so the registry secret is really used. Afterwards
every file of the Dagster instance (run and event-log databases, captured compute logs),
every Python log record and everything written to stdout/stderr is scanned. A second run with
a wrong registry password fails; its error events are scanned too.

Spark is replaced by an in-process stand-in (same ``parallelize(...).map(...).collect()``
calls, run here): Spark is not what this test is about, and the stage task code that runs
inside it is the real one.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kbqe_dagster.defs.staging.assets import staging_asset
from kbqe_dagster.defs.staging.jobs import stage_run_config
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster_tests.corpus.bad_input_corpus import load_corpus
from kbqe_dagster_tests.security.conftest import (
    KAFKA_SECRET,
    REGISTRY_SECRET,
    REGISTRY_USER,
    WRONG_SECRET,
    files_with_secrets,
    log_text,
    secrets_in,
)

CORPUS = load_corpus()


class _LocalRDD:
    def __init__(self, items) -> None:
        self._items = list(items)

    def map(self, function) -> _LocalRDD:
        return _LocalRDD(function(item) for item in self._items)

    def collect(self) -> list:
        return self._items


class _LocalContext:
    def parallelize(self, items, slices: int) -> _LocalRDD:
        return _LocalRDD(items)


class InProcessSpark:
    """The ``pyspark`` resource's surface the stage job uses, run in this process."""

    spark_context = _LocalContext()


@pytest.fixture(scope="module")
def corpus_topic(local_stack, authenticated_registry) -> tuple[str, int]:
    """The corpus schemas in the authenticated registry, the corpus on a new topic."""
    client = SchemaRegistryClient(
        {
            "url": authenticated_registry.endpoint,
            "basic.auth.user.info": authenticated_registry.user_info,
        }
    )
    ids = {
        name: client.register_schema(f"kbqe-secrets-{name}", Schema(s.text, s.schema_type))
        for name, s in CORPUS.schemas.items()
    }
    topic = f"com.acme.secrets.t{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    for case in CORPUS.cases:
        producer.produce(
            topic,
            value=case.value(ids),
            key=case.key,
            partition=0,
            headers=list(case.headers) or None,
        )
    assert producer.flush(30) == 0
    return topic, len(CORPUS.cases)


def _resources(tmp_path: Path, topic: str, bootstrap: str, registry_url: str) -> dict:
    pipeline = tmp_path / "pipeline.yaml"
    raw = json.loads(json.dumps(CORPUS.pipeline_template))
    raw["topics"][0]["name"] = topic
    pipeline.write_text(yaml.safe_dump(raw))
    return {
        "pipeline": PipelineResource(config_path=str(pipeline)),
        "kafka": KafkaResource(
            bootstrap_servers=bootstrap,
            security_protocol="PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_username="kbqe",
            sasl_password=dg.EnvVar("KBQE_TEST_SASL_PASSWORD"),
        ),
        "schema_registry": SchemaRegistryResource(
            url=registry_url, basic_auth_user_info=dg.EnvVar("KBQE_TEST_REGISTRY_AUTH")
        ),
        "staging": StagingResource(url=str(tmp_path / "staging")),
        "pyspark": InProcessSpark(),
        # The stage run builds the Storage Write sink from it when a table needs it; this
        # pipeline has none, so it is never reached.
        "bigquery": BigQueryResource(project="kbqe-local"),
    }


def _run(tmp_path: Path, topic: str, resources: dict) -> dg.ExecuteInProcessResult:
    home = tmp_path / "dagster_home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        return dg.materialize(
            [staging_asset([topic])],
            resources=resources,
            instance=instance,
            run_config=stage_run_config(topic),
            raise_on_error=False,
        )


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_staging_run_stores_and_prints_no_credentials(
    corpus_topic, local_stack, authenticated_registry, tmp_path, monkeypatch, caplog, capfd
):
    topic, messages = corpus_topic
    monkeypatch.setenv("KBQE_TEST_SASL_PASSWORD", KAFKA_SECRET)
    monkeypatch.setenv("KBQE_TEST_REGISTRY_AUTH", f"{REGISTRY_USER}:{REGISTRY_SECRET}")
    caplog.set_level(logging.DEBUG)
    result = _run(
        tmp_path,
        topic,
        _resources(tmp_path, topic, local_stack.kafka_bootstrap, authenticated_registry.endpoint),
    )

    assert result.success
    metadata = result.asset_materializations_for_node("staging")[0].metadata
    # Control: the registry accepted the credentials, every message was judged.
    assert metadata["messages"].value == messages
    assert metadata["dead_letters"].value == len(CORPUS.bad)
    assert metadata["dagster/row_count"].value == len(CORPUS.controls)
    assert not secrets_in(repr(metadata))
    home = tmp_path / "dagster_home"
    assert any(topic.encode() in p.read_bytes() for p in home.rglob("*") if p.is_file()), (
        "control: the scanned files hold the run's events"
    )
    assert files_with_secrets(home) == {}
    assert files_with_secrets(tmp_path / "staging") == {}
    out, err = capfd.readouterr()
    assert not secrets_in(out + err)
    assert not secrets_in(log_text(caplog.records))


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_failed_run_with_a_wrong_registry_password_stores_no_credentials(
    corpus_topic, local_stack, authenticated_registry, tmp_path, monkeypatch, caplog, capfd
):
    topic, _ = corpus_topic
    monkeypatch.setenv("KBQE_TEST_SASL_PASSWORD", KAFKA_SECRET)
    monkeypatch.setenv("KBQE_TEST_REGISTRY_AUTH", f"{REGISTRY_USER}:{WRONG_SECRET}")
    caplog.set_level(logging.DEBUG)
    result = _run(
        tmp_path,
        topic,
        _resources(tmp_path, topic, local_stack.kafka_bootstrap, authenticated_registry.endpoint),
    )

    assert not result.success
    failure = result.get_step_failure_events()[0].event_specific_data.error
    assert "401" in failure.to_string()  # control: the registry refused the wrong password
    assert not secrets_in(failure.to_string())
    assert files_with_secrets(tmp_path / "dagster_home") == {}
    assert list((tmp_path / "staging").glob("*")) == []  # nothing committed
    out, err = capfd.readouterr()
    assert not secrets_in(out + err)
    assert not secrets_in(log_text(caplog.records))
