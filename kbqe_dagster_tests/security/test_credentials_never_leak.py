"""Credentials never appear in a repr, a log record, an error message, staged files, the
staging asset's metadata, the Dagster definitions' snapshot or the output of ``kbqe``.

Recognizable secrets (``SuperSecret-123`` as ``sasl.password``, ``kbqe:SuperSecret-456`` as
registry basic auth, and a wrong ``SuperSecret-789``) go through the real code paths; every
place an operator could read is scanned for them and for their basic-auth encoding. Each
scan has a control showing the secret really was in play (the settings carry it, the wire
got it), so a scan that finds nothing proves something. The real Dagster run with an
instance on disk is in ``test_dagster_run_holds_no_credentials.py``.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value

from kbqe_dagster import cli
from kbqe_dagster.core.errors import StageRangeFailed
from kbqe_dagster.core.protocol.offsets import OffsetRange, RangePlan
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.staging.metadata import stage_metadata
from kbqe_dagster.resources.configurable import KafkaResource, SchemaRegistryResource
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG, KafkaReadError, KafkaSettings
from kbqe_dagster.resources.kafka.range_reader import read_range
from kbqe_dagster.resources.schema_registry import (
    RegistrySettings,
    RegistryUnavailableError,
    SchemaLookup,
)
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging import stager as stager_module
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.stager import RangeStager
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeSchemaLookup, fake_messages, load_corpus
from kbqe_dagster_tests.security.conftest import (
    KAFKA_SECRET,
    REGISTRY_SECRET,
    REGISTRY_USER,
    STUB_SCHEMA_ID,
    WRONG_SECRET,
    files_with_secrets,
    log_text,
    secrets_in,
)
from kbqe_dagster_tests.security.fake_broker import FakeBroker

REPO = Path(__file__).resolve().parents[2]
REGISTRY_AUTH = f"{REGISTRY_USER}:{REGISTRY_SECRET}"
KAFKA_CONFIG = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "kbqe",
    "sasl.password": KAFKA_SECRET,
    "ssl.key.password": KAFKA_SECRET,
    "sasl.oauthbearer.client.secret": KAFKA_SECRET,
}
SECRET_ENV = {
    "KBQE_KAFKA_BOOTSTRAP_SERVERS": "broker:9093",
    "KBQE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "KBQE_KAFKA_SASL_MECHANISM": "PLAIN",
    "KBQE_KAFKA_SASL_USERNAME": "kbqe",
    "KBQE_KAFKA_SASL_PASSWORD": KAFKA_SECRET,
    "KBQE_SCHEMA_REGISTRY_URL": "https://registry:8081",
    "KBQE_SCHEMA_REGISTRY_BASIC_AUTH": REGISTRY_AUTH,
    "KBQE_STAGING_URL": "gs://bucket/staging",
    "KBQE_GCP_PROJECT": "acme",
}
CORPUS = load_corpus()
TOPIC = "com.acme.corpus.secrets"


def _resolved(resource: dg.ConfigurableResource) -> dg.ConfigurableResource:
    """The resource as an asset receives it: EnvVars replaced by their values."""
    with dg.build_resources({"r": resource}) as built:
        return built.r


def _holders(monkeypatch) -> dict[str, object]:
    monkeypatch.setenv("KBQE_TEST_SASL_PASSWORD", KAFKA_SECRET)
    monkeypatch.setenv("KBQE_TEST_REGISTRY_AUTH", REGISTRY_AUTH)
    kafka = KafkaSettings("broker:9093", KAFKA_CONFIG)
    registry = RegistrySettings("https://registry:8081", REGISTRY_AUTH)
    return {
        "KafkaSettings": kafka,
        "RegistrySettings": registry,
        "RegistrySettings, credentials in the URL": RegistrySettings(
            f"https://{REGISTRY_AUTH}@registry:8081/apis/ccompat/v7"
        ),
        "StageContext": StageContext(
            kafka, registry, StagingLocation("/tmp/s"), CORPUS.pipeline(TOPIC), TOPIC
        ),
        "KafkaResource, literal": KafkaResource(
            bootstrap_servers="b:9093", sasl_password=KAFKA_SECRET
        ),
        "KafkaResource, EnvVar resolved": _resolved(
            KafkaResource(
                bootstrap_servers="b:9093", sasl_password=dg.EnvVar("KBQE_TEST_SASL_PASSWORD")
            )
        ),
        "SchemaRegistryResource, literal": SchemaRegistryResource(
            url="https://registry:8081", basic_auth_user_info=REGISTRY_AUTH
        ),
        "SchemaRegistryResource, EnvVar resolved": _resolved(
            SchemaRegistryResource(
                url="https://registry:8081",
                basic_auth_user_info=dg.EnvVar("KBQE_TEST_REGISTRY_AUTH"),
            )
        ),
    }


@pytest.mark.parametrize(
    "text",
    [
        f"ssl.key.password={KAFKA_SECRET}",
        # a pickled object in base64, shifted by a one-letter prefix (py4j's bytes marker)
        "j" + base64.b64encode(pickle.dumps({"ssl.key.password": KAFKA_SECRET})).decode(),
        # base64url, as a token carries it
        base64.urlsafe_b64encode(f"{{'client.secret': '{WRONG_SECRET}'}}".encode()).decode(),
    ],
)
def test_the_scanner_finds_a_secret_as_is_or_in_base64(text):
    assert secrets_in(text) and secrets_in(text.encode())


def test_the_scanner_finds_nothing_in_base64_without_a_secret():
    assert secrets_in(base64.b64encode(pickle.dumps({"ssl.key.location": "/k.pem"}))) == []


HOLDERS = [
    "KafkaSettings",
    "RegistrySettings",
    "RegistrySettings, credentials in the URL",
    "StageContext",
    "KafkaResource, literal",
    "KafkaResource, EnvVar resolved",
    "SchemaRegistryResource, literal",
    "SchemaRegistryResource, EnvVar resolved",
]


@pytest.mark.parametrize("name", HOLDERS)
def test_repr_and_str_of_what_holds_credentials_show_none(monkeypatch, caplog, name):
    holder = _holders(monkeypatch)[name]
    logging.getLogger("kbqe.test").warning("settings: %r / %s", holder, holder)
    assert not secrets_in(f"{holder!r} {holder!s} {holder}")
    assert not secrets_in(log_text(caplog.records))


def test_the_holders_do_carry_the_secrets(monkeypatch):
    """Control: the redaction hides secrets that are really there for the clients."""
    holders = _holders(monkeypatch)
    assert holders["KafkaSettings"].config()["sasl.password"] == KAFKA_SECRET
    assert holders["KafkaResource, EnvVar resolved"].settings().config()["sasl.password"] == (
        KAFKA_SECRET
    )
    for name in ("RegistrySettings", "RegistrySettings, credentials in the URL"):
        assert holders[name].client_config()["basic.auth.user.info"] == REGISTRY_AUTH
    assert holders["SchemaRegistryResource, EnvVar resolved"].settings().basic_auth_user_info == (
        REGISTRY_AUTH
    )


# --- the stage task ------------------------------------------------------------------------------
def _stage(tmp_path: Path, policy: str):
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("broker:9093", KAFKA_CONFIG),
        RegistrySettings("https://registry:8081", REGISTRY_AUTH),
        staging,
        CORPUS.pipeline(TOPIC, policy),
        TOPIC,
    )
    ids = {name: 21 + i for i, name in enumerate(CORPUS.schemas)}
    rng = OffsetRange(TOPIC, 0, 0, len(CORPUS.cases))
    (tmp_path / "work").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            stager_module, "SchemaLookup", lambda settings: FakeSchemaLookup(CORPUS.schemas, ids)
        )
        stager = RangeStager(ctx, rng, tmp_path / "work")
    for msg in fake_messages(CORPUS.cases, ids, TOPIC):
        stager.add(msg)
    return stager, rng, staging.open()


def test_stage_task_logs_files_and_metadata_hold_no_credentials(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    stager, rng, store = _stage(tmp_path, "dead_letter")
    result = stager.commit(store, rng.end_exclusive)
    summary = StageSummary(TOPIC, Preparation((), (), (), RangePlan((rng,), ())), (result,), 0.1)
    metadata = stage_metadata(summary)
    assert metadata["dead_letters"] == len(CORPUS.bad)  # the bad input really went through
    assert not secrets_in(serialize_value(dg.AssetMaterialization("staging", metadata=metadata)))
    assert not secrets_in(repr(result) + repr(summary))
    assert files_with_secrets(tmp_path) == {}
    assert not secrets_in(log_text(caplog.records))


def test_fail_policy_error_holds_no_credentials(tmp_path):
    with pytest.raises(StageRangeFailed) as failed:
        _stage(tmp_path, "fail")
    assert TOPIC in str(failed.value)
    assert not secrets_in(str(failed.value) + repr(failed.value))


# --- the registry and Kafka clients' error paths -------------------------------------------------
@pytest.mark.parametrize("how", ["basic_auth_user_info", "credentials in the URL"])
def test_registry_refusal_logs_and_errors_hold_no_credentials(stub_registry, caplog, how):
    caplog.set_level(logging.DEBUG)  # httpx logs every request's URL at INFO
    wrong = f"{REGISTRY_USER}:{WRONG_SECRET}"
    host = stub_registry.url.removeprefix("http://")
    settings = (
        RegistrySettings(stub_registry.url, wrong)
        if how == "basic_auth_user_info"
        else RegistrySettings(f"http://{wrong}@{host}")
    )
    with pytest.raises(RegistryUnavailableError) as refused:
        SchemaLookup(settings).get(STUB_SCHEMA_ID)
    assert stub_registry.authorizations[-1] is not None  # control: credentials were sent
    assert not secrets_in(str(refused.value) + repr(refused.value))
    assert not secrets_in(log_text(caplog.records))


def test_kafka_authentication_failure_logs_and_errors_hold_no_credentials(caplog, capfd):
    caplog.set_level(logging.DEBUG)
    settings = KafkaSettings(
        "",
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "kbqe",
            "sasl.password": KAFKA_SECRET,
        },
    )
    error = ""
    with FakeBroker() as broker:
        settings = KafkaSettings(broker.bootstrap, settings.client_config)
        try:
            list(read_range(settings, "t", 0, 0, 1, idle_timeout=1.0))
        except KafkaReadError as e:
            error = f"{e} {e!r}"
        seen = broker.wait()
    assert secrets_in(seen.auth_bytes)  # control: the password went to the broker
    out, err = capfd.readouterr()
    # librdkafka's own log lines go to the kbqe_dagster.kafka logger (resources/kafka/cluster.py).
    logged = log_text([r for r in caplog.records if r.name == CLIENT_LOG.name])
    assert "SASL" in logged or "sasl" in logged  # control: the failure was logged
    assert not secrets_in(out + err + error)
    assert not secrets_in(log_text(caplog.records))


# --- Dagster definitions (what the UI shows about resources) -------------------------------------
def _snapshot(env: str) -> str:
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env=env)
    return serialize_value(RepositorySnap.from_def(defs.get_repository_def()))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Dagster's own, in the snapshot code
def test_definitions_snapshot_names_secret_variables_not_their_values(monkeypatch):
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    snapshot = _snapshot("gcp")
    assert "KBQE_KAFKA_SASL_PASSWORD" in snapshot  # control: the resource config is in it
    assert "KBQE_SCHEMA_REGISTRY_BASIC_AUTH" in snapshot
    assert not secrets_in(snapshot)


# --- kbqe operator commands ----------------------------------------------------------------------
def _kbqe(capsys, caplog, *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err + log_text(caplog.records)


def test_operator_commands_print_no_credentials_from_the_environment(
    tmp_path, monkeypatch, capsys, caplog
):
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    stager, rng, store = _stage(tmp_path, "dead_letter")
    stager.commit(store, rng.end_exclusive)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        json.dumps(
            json.loads(json.dumps(CORPUS.pipeline_template))
            | {"topics": [{**CORPUS.pipeline_template["topics"][0], "name": TOPIC}]}
        )
    )
    staging = ["--staging", str(tmp_path / "staging")]
    commands = [
        ["staging", "status", *staging],
        ["staging", "status", *staging, "--json"],
        ["load", "plan", *staging, "--config", str(pipeline)],
        ["retention", "plan", *staging],
        ["dead-letters", *staging, "--config", str(pipeline), "--json", "--limit", "100"],
        ["-v", "dead-letters", *staging, "--config", str(pipeline)],
    ]
    for argv in commands:
        code, output = _kbqe(capsys, caplog, *argv)
        assert code == 0, (argv, output)
        assert not secrets_in(output), argv
    assert "bad_magic" in _kbqe(capsys, caplog, *commands[4])[1]  # control: real output


def test_produce_sample_prints_no_credentials_given_in_the_registry_url(
    stub_registry, capsys, caplog
):
    host = stub_registry.url.removeprefix("http://")
    code, output = _kbqe(
        capsys,
        caplog,
        "produce-sample",
        "--count",
        "1",
        "--bootstrap-servers",
        "127.0.0.1:9",
        "--registry-url",
        f"http://{REGISTRY_USER}:{WRONG_SECRET}@{host}",
    )
    assert code == 1 and "401" in output  # control: the stub refused the (wrong) credentials
    assert not secrets_in(output)
