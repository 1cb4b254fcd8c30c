"""The pipeline file: defaults, inheritance, and errors that name the exact key path."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.config.pipeline import (
    BadInputPolicy,
    DeadLetterDestination,
    EnrichmentConfig,
    LoadSettings,
    PipelineConfig,
    RetentionSettings,
    StagingSettings,
    jobs_per_table_per_day,
    load_pipeline_config,
    parse_pipeline_config,
)
from kbqe_dagster.core.config.sections import FileCodec
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.core.protocol.offsets import StartPolicy
from kbqe_dagster.core.record.event_time import DateRule, EpochUnit, EventTimeConfig
from kbqe_dagster.core.record.routing import Destination, RoutingInput, RoutingMode

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.yaml"


def _base() -> dict[str, Any]:
    return {
        "topics": [
            {"name": "com.acme.events", "event_time": {"fields": ["eventTime"]}},
            {
                "name": "audit",
                "routing": {"mode": "static", "dataset": "ops", "table": "audit"},
                "event_time": {"kafka_timestamp_fallback": True},
            },
        ],
        "allowed_destinations": ["acme_sales.*", "acme_web.*"],
    }


def _parse(change: Callable[[dict[str, Any]], Any] | None = None) -> PipelineConfig:
    raw = _base()
    if change:
        change(raw)
    return parse_pipeline_config(raw, source="test.yaml")


def _problems(change: Callable[[dict[str, Any]], Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        _parse(change)
    return str(caught.value)


def test_example_pipeline_file_is_valid_and_says_what_the_demo_needs() -> None:
    config = load_pipeline_config(EXAMPLE)
    topic, audit = config.topics
    assert topic.name == "com.acme.events"
    assert (audit.name, audit.format) == ("com.acme.audit", SourceFormat.RAW)
    assert audit.routing.static_destination == Destination("acme_audit", "events")
    assert topic.routing.mode is RoutingMode.FIELDS
    assert topic.event_time.fields == ("eventTime", "occurredAt")
    assert topic.event_time.kafka_timestamp_fallback is False
    assert config.allowed_destinations.patterns == (
        "acme_sales.orders",
        "acme_web.*",
        "acme_audit.events",  # the raw archive's static route, implicitly allowed
    )
    router = config.router("com.acme.events")
    for dataset, table in (("acme_sales", "orders"), ("acme_web", "page_views")):
        fields = {"datasetName": dataset, "tableName": table}
        message = RoutingInput("com.acme.events", 0, 1, None, fields)
        assert router.route(message) == Destination(dataset, table)
    assert config.warnings == ()


def test_minimal_config_takes_documented_defaults() -> None:
    config = parse_pipeline_config(
        {"topics": [{"name": "t", "event_time": {"fields": ["ts"]}}]}, source="min.yaml"
    )
    (topic,) = config.topics
    assert topic.routing.mode is RoutingMode.FIELDS
    assert (topic.routing.dataset_field, topic.routing.table_field) == ("datasetName", "tableName")
    assert topic.on_bad_input is BadInputPolicy.DEAD_LETTER
    assert topic.event_time.date_rule is DateRule.LOCAL
    assert topic.event_time.epoch_unit is EpochUnit.AUTO
    assert topic.staging == StagingSettings()
    assert topic.staging.allowed_latency == timedelta(minutes=15)
    assert topic.staging.file_codec is FileCodec.SNAPPY
    assert topic.staging.start_offset is StartPolicy.EARLIEST
    assert config.dead_letter == DeadLetterDestination("kbqe_dead_letters", "dead_letters")
    assert config.enrichment == EnrichmentConfig()
    assert config.enrichment.columns == (
        "_event_date", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp",
    )  # fmt: skip
    assert config.load == LoadSettings()
    assert (config.load.max_files_per_job, config.load.max_retries) == (10_000, 3)
    assert config.load.cadence == timedelta(minutes=15)
    assert config.retention == RetentionSettings()
    assert config.allowed_destinations.patterns == ()
    assert config.source == "min.yaml"


def test_top_level_sections_are_defaults_that_topics_override_key_by_key() -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["event_time"] = {"fields": ["occurredAt"], "date_rule": "utc", "epoch_unit": "ms"}
        raw["staging"] = {"allowed_latency": "5m", "file_codec": "deflate"}
        raw["on_bad_input"] = "skip"
        raw["topics"][0]["staging"] = {"allowed_latency": "30s"}
        raw["topics"][0]["on_bad_input"] = "fail"

    events, audit = _parse(change).topics
    assert events.event_time == EventTimeConfig(
        fields=("eventTime",), date_rule=DateRule.UTC, epoch_unit=EpochUnit.MILLISECONDS
    )
    assert audit.event_time.fields == ("occurredAt",)
    assert audit.event_time.kafka_timestamp_fallback is True
    assert (events.staging.allowed_latency, events.staging.file_codec) == (
        timedelta(seconds=30),
        FileCodec.DEFLATE,
    )
    assert (audit.staging.allowed_latency, audit.staging.file_codec) == (
        timedelta(minutes=5),
        FileCodec.DEFLATE,
    )
    assert (events.on_bad_input, audit.on_bad_input) == (BadInputPolicy.FAIL, BadInputPolicy.SKIP)


def test_the_loop_interval_is_a_second_unless_a_topic_or_the_pipeline_says_otherwise() -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["topics"][0]["staging"] = {"loop_interval": "250ms"}

    assert [t.staging.loop_interval for t in _parse().topics] == [timedelta(seconds=1)] * 2
    events, audit = _parse(change).topics
    assert (events.staging.loop_interval, audit.staging.loop_interval) == (
        timedelta(milliseconds=250),
        timedelta(seconds=1),
    )


def test_static_destinations_are_implicitly_allowed() -> None:
    config = _parse()
    assert config.allowed_destinations.patterns == ("acme_sales.*", "acme_web.*", "ops.audit")
    assert config.router("audit").route(RoutingInput("audit", 0, 0, None, {})) == ("ops", "audit")
    assert not config.allowed_destinations.allows("ops", "other")


def test_required_fields_combine_routing_and_event_time_without_duplicates() -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["topics"][0]["event_time"] = {"fields": ["tableName", "ts"]}

    assert _parse(change).topics[0].required_fields == ("datasetName", "tableName", "ts")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change that sets ``a.b[0].c``-style ``path`` in the raw config."""

    def change(raw: dict[str, Any]) -> None:
        target: Any = raw
        keys = path.replace("[", ".").replace("]", "").split(".")
        for key in keys[:-1]:
            key_or_index: Any = int(key) if key.isdigit() else key
            if isinstance(target, dict):
                target = target.setdefault(key_or_index, {})
            else:
                target = target[key_or_index]
        target[keys[-1]] = value

    return change


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("topics[1].routing.mode", "feild",
         "topics[1].routing.mode: expected one of static, fields, schema_name, function, "
         "got 'feild'"),
        ("topics[0].name", "bad topic", "topics[0].name: not a legal Kafka topic name"),
        ("topics[0].name", 7, "topics[0].name: expected a non-empty string, got int 7"),
        ("topics[0].on_bad_input", "ignore",
         "topics[0].on_bad_input: expected one of dead_letter, skip, fail, got 'ignore'"),
        ("topics[0].event_time.fields", "eventTime",
         "topics[0].event_time.fields: expected a list"),
        ("topics[0].event_time.fields", ["a", 3],
         "topics[0].event_time.fields[1]: expected a non-empty string, got int 3"),
        ("topics[0].event_time.fields", ["a", "a"],
         "topics[0].event_time.fields[1]: duplicate entry 'a'"),
        ("topics[0].event_time.epoch_unit", "min",
         "topics[0].event_time.epoch_unit: expected one of s, ms, us, ns, auto, got 'min'"),
        ("topics[0].event_time.kafka_timestamp_fallback", "no",
         "topics[0].event_time.kafka_timestamp_fallback: expected true or false, got 'no'"),
        ("topics[0].event_time.min_date", "soon",
         "topics[0].event_time.min_date: expected a date YYYY-MM-DD, got 'soon'"),
        ("topics[0].event_time",
         {"fields": ["a"], "min_date": date(2020, 1, 1), "max_date": "2019-01-01"},
         "topics[0].event_time: min_date 2020-01-01 is after max_date 2019-01-01"),
        ("topics[0].staging.allowed_latency", 900,
         "topics[0].staging.allowed_latency: expected a duration such as '30s', '15m', '1h', "
         "got int 900"),
        ("topics[0].staging.allowed_latency", "15 minutes",
         "topics[0].staging.allowed_latency: expected a duration"),
        ("topics[0].staging.loop_interval", 1,
         "topics[0].staging.loop_interval: expected a duration such as '30s', '15m', '1h', "
         "got int 1"),
        ("staging.loop_interval", "10ms",
         "staging.loop_interval: must be at least 100ms, got '10ms'"),
        ("topics[0].staging.max_messages_per_range", 0,
         "topics[0].staging.max_messages_per_range: must be at least 1, got 0"),
        ("staging.max_messages_per_batch", True,
         "staging.max_messages_per_batch: expected an integer, got bool True"),
        ("staging.min_bytes_per_file", "lots", "staging.min_bytes_per_file: expected a size"),
        ("staging.file_codec", "zstd",
         "staging.file_codec: expected one of snappy, deflate, null, got 'zstd'"),
        ("staging.start_offset", "beginning",
         "staging.start_offset: expected one of earliest, latest, got 'beginning'"),
        ("topics[1].routing.dataset", "o.ps", "topics[1].routing.dataset: not a dataset name"),
        ("topics[1].routing.table_field", "x",
         "topics[1].routing.table_field: not used by routing mode static"),
        ("topics[0].routing.function", "m:f",
         "topics[0].routing.function: not used by routing mode fields"),
        ("allowed_destinations", ["acme_sales.*", "*.*"],
         "allowed_destinations[1]: allow-list entry '*.*'"),
        ("allowed_destinations", "acme_sales.*",
         "allowed_destinations: expected a list, got 'acme_sales.*'"),
        ("allowed_destinations", ["_kbqe.*"],
         "allowed_destinations: dataset '_kbqe' is reserved"),
        ("dead_letter.table", "dead.letters", "dead_letter.table: not a table name"),
        ("enrichment.offset_column", "1offset", "enrichment.offset_column: a column name is"),
        ("enrichment.offset_column", "_offset\n", "enrichment.offset_column: a column name is"),
        ("enrichment.offset_column", None,
         "enrichment.offset_column: expected a non-empty string, got null"),
        ("enrichment.topic_column", "_PARTITION_topic",
         "enrichment.topic_column: BigQuery reserves the prefix of '_PARTITION_topic'"),
        ("enrichment.key_column", "_kafka_topic",
         "enrichment: key_column and topic_column both name column '_kafka_topic'"),
        ("load.max_files_per_job", 20_000,
         "load.max_files_per_job: must be at most 10,000, got 20,000"),
        ("load.job_id_prefix", "kbqe prod", "load.job_id_prefix: use 1-64 of"),
        ("load.partition_expiration_days", 0,
         "load.partition_expiration_days: must be at least 1, got 0"),
        ("load.create_datasets", "yes", "load.create_datasets: expected true or false"),
        ("load.cadence", "1m",
         "load.cadence: 1m means 1,440 load jobs per table per day, over 50% of BigQuery's 1,500"),
        ("retention.keep_load_history", "a week",
         "retention.keep_load_history: expected a duration"),
        ("version", 2, "version: expected 1, got int 2"),
        ("load", ["cadence"], "load: expected a mapping, got a list"),
    ],
)  # fmt: skip
def test_each_wrong_value_is_reported_at_its_key_path(path: str, value: Any, expected: str) -> None:
    message = _problems(_set(path, value))
    assert message.startswith("test.yaml: 1 problem(s):\n  - ")
    assert expected in message


@pytest.mark.parametrize(
    "path, expected",
    [
        ("topics[0].evnt_time", "topics[0].evnt_time: unknown key; did you mean 'event_time'?"),
        ("topics[1].routing.tabel", "topics[1].routing.tabel: unknown key; did you mean 'table'?"),
        ("staging.allowed_latencey", "did you mean 'allowed_latency'?"),
        ("load.cadance", "load.cadance: unknown key; did you mean 'cadence'?"),
        ("alowed_destinations",
         "alowed_destinations: unknown key; did you mean 'allowed_destinations'?"),
        ("enrichment.zzz",
         "enrichment.zzz: unknown key; expected one of event_date_column, event_hour_column, "
         "headers_column"),
    ],
)  # fmt: skip
def test_unknown_keys_are_refused_with_a_suggestion(path: str, expected: str) -> None:
    assert expected in _problems(_set(path, "x"))


def test_all_problems_are_collected_into_one_error() -> None:
    def change(raw: dict[str, Any]) -> None:
        raw["topics"][0]["routing"] = {"mode": "feild", "dataset": "x"}
        raw["topics"][1]["name"] = ""
        raw["load"] = {"max_retries": -1, "cadance": "5m"}

    message = _problems(change)
    assert message.startswith("test.yaml: 4 problem(s):")
    for part in (
        "topics[0].routing.mode: expected one of",
        "topics[1].name: expected a non-empty string, got ''",
        "load.max_retries: must be at least 0, got -1",
        "load.cadance: unknown key; did you mean 'cadence'?",
    ):
        assert part in message
    assert "routing.dataset" not in message  # not judged against a guessed mode


@pytest.mark.parametrize(
    "raw, expected",
    [
        (None, "topics: expected a list of at least one topic, got null"),
        ([], "expected a mapping, got a list"),
        ({"topics": []}, "topics: expected a list of at least one topic, got a list"),
        ({"topics": [{"event_time": {"fields": ["t"]}}]}, "topics[0].name: required"),
        ({"topics": ["com.acme.events"]}, "topics[0]: expected a mapping, got 'com.acme.events'"),
        ({"topics": [{"name": "t"}]}, "topics[0].event_time: needs at least one field or kafka_"),
        (
            {"topics": [{"name": "t", "event_time": {"fields": ["a"]}}] * 2},
            "topics[1].name: duplicate of topics[0]",
        ),
    ],
)
def test_structural_problems_are_named(raw: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_config(raw)
    assert expected in str(caught.value)


def test_static_route_needs_both_names() -> None:
    message = _problems(_set("topics[1].routing", {"mode": "static", "dataset": "ops"}))
    assert "topics[1].routing: static routing needs both 'dataset' and 'table'" in message


def test_schema_name_datasets_must_be_declared() -> None:
    routing = {
        "mode": "schema_name",
        "dataset": "acme_sales",
        "namespace_datasets": {"com.acme.hr": "acme_hr", "com.acme.web": "acme_web"},
    }
    message = _problems(_set("topics[0].routing", routing))
    expected = "topics[0].routing.namespace_datasets.com.acme.hr: dataset 'acme_hr' is not in"
    assert expected in message
    assert "acme_web" not in message and "routing.dataset" not in message


def test_routing_function_is_resolved_when_the_config_is_parsed() -> None:
    spec = "kbqe_dagster_tests.core.test_routing:route_by_key"
    ok = _parse(_set("topics[0].routing", {"mode": "function", "function": spec}))
    assert ok.topics[0].routing.function == spec
    message = _problems(_set("topics[0].routing", {"mode": "function", "function": "nope_mod:f"}))
    assert "topics[0].routing.function: routing function 'nope_mod:f' cannot be imported" in message


def test_allow_list_must_not_cover_the_dead_letter_table() -> None:
    message = _problems(_set("allowed_destinations", ["kbqe_dead_letters.*"]))
    assert (
        "allowed_destinations: covers the dead-letter table kbqe_dead_letters.dead_letters"
        in message
    )


@pytest.mark.parametrize(
    "yaml_value, codec",
    [("null", FileCodec.NULL), ("'null'", FileCodec.NULL), ("deflate", FileCodec.DEFLATE)],
)
def test_yaml_null_codec_means_uncompressed(
    tmp_path: Path, yaml_value: str, codec: FileCodec
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "topics:\n  - name: t\n    event_time: {fields: [ts]}\n"
        f"staging:\n  file_codec: {yaml_value}\n  min_bytes_per_file: 64MiB\n"
    )
    staging = load_pipeline_config(path).topics[0].staging
    assert (staging.file_codec, staging.min_bytes_per_file) == (codec, 64 * 2**20)


def test_unreadable_or_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=r"absent\.yaml: cannot read"):
        load_pipeline_config(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("topics: [\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: not valid YAML"):
        load_pipeline_config(broken)


def test_unknown_topic_lookup_names_the_source() -> None:
    with pytest.raises(ConfigError, match="test.yaml: topic 'nope' is not configured"):
        _parse().topic("nope")


@pytest.mark.parametrize(
    "cadence, schema_ids, jobs",
    [
        (timedelta(minutes=15), 1, 96),
        (timedelta(minutes=5), 1, 288),
        (timedelta(minutes=7), 1, 206),  # a partial last cycle still runs
        (timedelta(minutes=1), 1, 1440),
        (timedelta(minutes=15), 3, 288),
        (timedelta(hours=25), 1, 1),
    ],
)
def test_jobs_per_table_per_day(cadence: timedelta, schema_ids: int, jobs: int) -> None:
    assert jobs_per_table_per_day(cadence, schema_ids) == jobs


@pytest.mark.parametrize(
    "cadence, outcome",
    [
        ("15m", "ok"),
        ("4m", "ok"),  # 360/day: 24%
        ("3m", "warning"),  # 480/day: 32%
        ("2m", "warning"),  # 720/day: 48%
        ("1m55s", "error"),  # 752/day: over 50%
        ("30s", "error"),
    ],
)
def test_load_cadence_is_held_to_a_safe_share_of_the_quota(cadence: str, outcome: str) -> None:
    change = _set("load.cadence", cadence)
    if outcome == "error":
        assert "load.cadence: " in _problems(change)
        return
    warnings = _parse(change).warnings
    assert len(warnings) == (1 if outcome == "warning" else 0)
    if warnings:
        assert warnings[0].startswith(f"load.cadence {cadence} uses ")


def test_jobs_per_table_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        jobs_per_table_per_day(timedelta(0))
    with pytest.raises(ValueError):
        jobs_per_table_per_day(timedelta(minutes=5), schema_ids=0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("1h", timedelta(hours=1)),
        ("1h30m", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
        ("2d", timedelta(days=2)),
        ("1.5h", timedelta(minutes=90)),
        (" 1h 30m ", timedelta(minutes=90)),
    ],
)
def test_durations_read_with_units(text: str, expected: timedelta) -> None:
    assert r.duration()(text) == expected


@pytest.mark.parametrize("text", ["", "15", "15x", "m", "1h30", "-5m", "15 minutes", "1h+30m"])
def test_durations_without_valid_units_are_refused(text: str) -> None:
    with pytest.raises(r.Invalid, match="expected a duration"):
        r.duration()(text)


@pytest.mark.parametrize(
    "value, text",
    [
        (timedelta(minutes=15), "15m"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(days=7), "7d"),
        (timedelta(milliseconds=1500), "1s500ms"),
        (timedelta(0), "0s"),
    ],
)
def test_durations_format_back_in_the_same_units(value: timedelta, text: str) -> None:
    assert r.format_duration(value) == text
    assert r.duration()(text) == value


@pytest.mark.parametrize(
    "value, size",
    [(1048576, 1048576), ("1MiB", 2**20), ("1MB", 10**6), ("512KiB", 512 * 1024),
     ("2GiB", 2 * 2**30), ("100B", 100), ("100", 100), ("1.5MiB", 3 * 2**19)],
)  # fmt: skip
def test_byte_sizes(value: Any, size: int) -> None:
    assert r.byte_size()(value) == size


def test_parsed_config_survives_pickling_to_spark_executors() -> None:
    config = load_pipeline_config(EXAMPLE)
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config
    assert copy.allowed_destinations.allows("acme_web", "page_views")


def test_completeness_defaults_to_kafka_time_and_topics_override_it_key_by_key() -> None:
    from kbqe_dagster.core.completeness.decision import Basis

    assert (_parse().topics[0].completeness.basis, _parse().topics[0].completeness.lateness) == (
        Basis.KAFKA_TIME,
        timedelta(minutes=5),
    )

    def change(raw: dict[str, Any]) -> None:
        raw["completeness"] = {"lateness": "1h"}
        raw["topics"][0]["completeness"] = {"basis": "event_time"}

    settings = _parse(change).topics[0].completeness
    assert (settings.basis, settings.lateness) == (Basis.EVENT_TIME, timedelta(hours=1))
    assert "completeness.basis" in _problems(_set("completeness", {"basis": "wall_clock"}))
