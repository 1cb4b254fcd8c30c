"""The delivery sink (kbqe_dagster/delivery/sink.py) with a real staging area (a directory)
and the Storage Write API faked at its client boundary (support/storage_write.py): one topic
feeding a ``load`` table and a ``storage_write`` table; what each commit writes where, and a
kill at every new crash point followed by a retry gives exactly one copy."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import SchemaChangeRefusedError, StagingError
from kbqe_dagster.core.protocol.commit import parse_manifest
from kbqe_dagster.core.protocol.delivery import open_intents, ranges_to_roll_forward
from kbqe_dagster.core.protocol.offsets import OffsetRange, RangePlan
from kbqe_dagster.delivery.sink import DeliverySinkFactory, delivery_sink
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging import job as stage_job
from kbqe_dagster.staging import stager as stager_module
from kbqe_dagster.staging.context import RangeResult
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.stager import chosen_stager
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
from kbqe_dagster_tests.support.framing import avro_framed
from kbqe_dagster_tests.support.storage_write import (
    Crash,
    FakeStorageWriter,
    FakeTableKeeper,
    fake_storage_write,
)

TOPIC = "web.events"
SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "ts", "type": "string"},
        {"name": "n", "type": "long"},
    ],
}
SCHEMA_ID = 7
TABLES = ("clicks", "views")  # clicks: storage_write; views: load


def _pipeline(clicks: str = "storage_write"):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {"name": TOPIC, "event_time": {"fields": ["ts"]}, "routing": {"mode": "fields"}}
            ],
            "allowed_destinations": ["acme.*"],
            "tables": {"acme.clicks": {"delivery": clicks}},
        }
    )


def _messages(first: int, count: int) -> list[FakeMessage]:
    return [
        FakeMessage(
            TOPIC,
            0,
            o,
            avro_framed(
                SCHEMA_ID,
                SCHEMA,
                {
                    "datasetName": "acme",
                    "tableName": TABLES[o % 2],
                    "ts": "2026-11-25T10:00:00Z",
                    "n": o,
                },
            ),
            b"k",
            [],
            1_764_064_800_000 + o,
        )
        for o in range(first, first + count)
    ]


class Stage:
    """Stages ranges of the topic through the delivery sink into one staging directory."""

    def __init__(
        self, tmp_path: Path, writer: FakeStorageWriter | None = None, clicks: str = "storage_write"
    ) -> None:
        self.tmp = tmp_path
        self.staging = StagingLocation(str(tmp_path / "staging"))
        self.store = self.staging.open()
        self.writer_settings, self.keeper_settings = fake_storage_write(str(tmp_path), writer)
        self.writer = self.writer_settings.writer()
        self.clicks = clicks
        self.runs = 0

    def range(self, first: int, count: int, clicks: str | None = None) -> RangeResult:
        pipeline = _pipeline(clicks or self.clicks)
        sink = delivery_sink(pipeline, self.writer_settings, self.keeper_settings)
        ctx = stage_context(
            KafkaSettings("127.0.0.1:9"),
            RegistrySettings("http://127.0.0.1:9"),
            self.staging,
            pipeline,
            TOPIC,
            sink=sink,
            native_kernel=False,
        )
        # What the driver does after preparing the topic (staging/job.py).
        prep = Preparation((), (), (), RangePlan((), ()), open_intents=open_intents(self.names()))
        ctx = stage_job._pinned(ctx, [prep])
        self.runs += 1
        workdir = self.tmp / f"work{self.runs}"
        workdir.mkdir()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(
                stager_module,
                "SchemaLookup",
                lambda settings: FakeSchemaRegistry.avro({SCHEMA_ID: SCHEMA}),
            )
            stager = chosen_stager(ctx)(ctx, OffsetRange(TOPIC, 0, first, first + count), workdir)
        for msg in _messages(first, count):
            stager.add(msg)
        return stager.commit(self.store, first + count)

    def names(self) -> list[str]:
        return sorted(f.name for f in self.store.list(""))

    def loaded_rows(self, table: str) -> list[dict]:
        """The records of the table's avro files in the staging area (what loads would load)."""
        out = []
        for name in self.names():
            if name.endswith(".avro") and f".acme.{table}." in name:
                out += list(fastavro.reader(io.BytesIO(self.store.read_bytes(name))))
        return out


def _offsets(rows: list[dict]) -> list[int]:
    return sorted(int(r["_kafka_offset"]) for r in rows)


# --- one commit ------------------------------------------------------------------------------
def test_a_storage_write_table_s_rows_are_appended_and_the_load_table_s_staged(tmp_path):
    stage = Stage(tmp_path)
    result = stage.range(0, 10)
    assert _offsets(stage.writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8]
    assert _offsets(stage.loaded_rows("views")) == [1, 3, 5, 7, 9]
    assert stage.loaded_rows("clicks") == []  # no avro file for a storage_write table
    (delivery,) = result.delivered
    assert (
        delivery.dataset,
        delivery.table,
        delivery.first_row,
        delivery.rows,
        delivery.records,
        delivery.refused,
    ) == ("acme", "clicks", 0, 5, 5, 0)
    assert delivery.bytes > 0 and delivery.days == (("2026-11-25", 5),)
    assert result.committed_last == 9 and result.records == 10
    assert result.files == (("web.events.0.acme.views.7.0.avro", 5),)  # files written only


def test_the_done_file_s_manifest_says_where_the_rows_went(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    done = "web.events.0.acme.clicks.7.0.9.done"
    manifest = parse_manifest(stage.store.read_bytes(done), done)
    entry = next(f for f in manifest.files if ".clicks." in f.avro)
    (stream,) = stage.writer.streams
    assert (entry.delivered.stream, entry.delivered.offset, entry.delivered.rows) == (stream, 0, 5)
    assert entry.records == 5
    intent = json.loads(stage.store.read_bytes("web.events.0.acme.clicks.7.0.9.intent"))
    assert (
        intent["stream"],
        intent["offset"],
        intent["first"],
        intent["last"],
        intent["parts"],
    ) == (stream, 0, 0, 9, [[7, 5]])


def test_the_load_table_s_files_are_those_the_staging_area_sink_writes(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10, clicks="load")
    assert stage.writer.appends() == []
    assert not any(n.endswith(".intent") for n in stage.names())
    assert _offsets(stage.loaded_rows("clicks")) == [0, 2, 4, 6, 8]
    # Without a storage_write table nor Storage Write settings: the staging area's own sink.
    assert delivery_sink(_pipeline("load"), None, None) is None


# --- switching a table between load and storage_write -----------------------------------------
def test_a_switch_to_load_takes_effect_at_the_next_range_after_an_open_intent(tmp_path):
    """A range begun through the API (an open intent, some of its rows in the table) is
    finished through the API after the table switched to load: staged as an avro file too, its
    rows would be in the table twice once loaded."""
    from kbqe_dagster.delivery import rows

    writer = FakeStorageWriter()
    stage = Stage(tmp_path, writer)
    stage.range(0, 10)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rows, "CHUNK_RECORDS", 2)
        writer.crash_after = 2
        with pytest.raises(Crash):
            stage.range(10, 12)  # clicks 10..20: killed after its first request (2 rows)
        assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10, 12]
        restaged = stage.range(10, 12, clicks="load")
    assert [d.table for d in restaged.delivered] == ["clicks"]
    assert not any(n.endswith(".avro") and ".clicks." in n for n in stage.names())
    stage.range(22, 6, clicks="load")  # the next range: the switch
    assert _offsets(writer.table_rows("acme", "clicks")) == list(range(0, 22, 2))
    assert _offsets(stage.loaded_rows("clicks")) == [22, 24, 26]
    assert _offsets(stage.loaded_rows("views")) == list(range(1, 28, 2))
    assert ranges_to_roll_forward(stage.names()) == ()


def test_a_load_only_pipeline_with_api_settings_stages_as_the_staging_area_sink(tmp_path):
    stage = Stage(tmp_path, clicks="load")
    factory = delivery_sink(_pipeline("load"), stage.writer_settings, stage.keeper_settings)
    assert isinstance(factory, DeliverySinkFactory)  # ready to finish an open intent
    stage.range(0, 10)
    assert stage.writer.calls == [] and not any(n.endswith(".intent") for n in stage.names())
    assert _offsets(stage.loaded_rows("clicks")) == [0, 2, 4, 6, 8]


def test_a_switched_table_with_an_open_intent_and_no_delivery_sink_is_an_error_naming_it():
    prep = Preparation(
        (),
        (),
        (),
        RangePlan((), ()),
        open_intents=open_intents(["web.events.0.acme.clicks.7.10.21.intent"]),
    )
    ctx = stage_context(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation("/nowhere"),
        _pipeline("load"),
        TOPIC,
        sink=None,
    )
    with pytest.raises(StagingError, match=r"web\.events\.0\.acme\.clicks\.7\.10\.21\.intent"):
        stage_job._pinned(ctx, [prep])


def test_the_next_range_continues_the_same_stream_at_the_next_row(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    second = stage.range(10, 6)
    assert len(stage.writer.streams) == 1  # reused, not created per range
    assert (second.delivered[0].first_row, second.delivered[0].rows) == (5, 3)
    assert [offset for _, offset, _ in stage.writer.appends()] == [0, 5]
    assert _offsets(stage.writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10, 12, 14]


def test_each_range_releases_its_stream_s_connection_after_its_appends(tmp_path):
    """One connection per range and stream: the next range of the (table, partition) may be
    staged by another Spark worker, and an AppendRows connection left open holds a server's
    worker (the local emulator has six: a long-lived stage loop whose workers kept every
    stream's connection stopped answering new ones)."""
    stage = Stage(tmp_path)
    stage.range(0, 10)
    stage.range(10, 6)
    (stream,) = stage.writer.streams
    kinds = [
        (kind, arg if kind == "release" else arg[1])
        for kind, arg in stage.writer.calls
        if kind in ("append", "release")
    ]
    assert kinds == [("append", 0), ("release", stream), ("append", 5), ("release", stream)]


def test_a_range_that_fails_mid_append_still_releases_its_stream(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    (stream,) = stage.writer.streams
    stage.writer.streams[stream].rows.pop()
    with pytest.raises(StagingError):
        stage.range(10, 10)
    assert stage.writer.calls[-1] == ("release", stream)


def test_a_schema_the_table_cannot_take_fails_the_range_before_any_row_is_appended(
    tmp_path, monkeypatch
):
    # The keeper refuses a type change (delivery/tables.py, core/load/evolution.py).
    refusal = "table acme.clicks: column n is INTEGER and a newer schema makes it STRING"

    def refuse(self, dataset, table, file_schema, layout):
        raise SchemaChangeRefusedError(refusal)

    monkeypatch.setattr(FakeTableKeeper, "ensure", refuse)
    stage = Stage(tmp_path)
    with pytest.raises(SchemaChangeRefusedError, match=refusal):
        stage.range(0, 10)
    assert stage.writer.table_rows("acme", "clicks") == []
    assert not [n for n in stage.names() if n.endswith((".done", ".intent"))], "nothing committed"


# --- crashes and retries ----------------------------------------------------------------------
def _retry_until_committed(stage: Stage, first: int, count: int) -> RangeResult:
    """What the next run does: roll the open intent's exact range forward."""
    assert ranges_to_roll_forward(stage.names()) in (
        (),
        (OffsetRange(TOPIC, 0, first, first + count),),
    )
    return stage.range(first, count)


@pytest.mark.parametrize(
    "point",
    ["storage_write_intent", "storage_write_appended", "storage_write_delivered", "done_created"],
)
def test_a_kill_at_each_crash_point_then_a_retry_gives_exactly_one_copy(
    tmp_path, monkeypatch, point
):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    monkeypatch.setenv("KBQE_CRASH_AT", f"{point}:1")
    from kbqe_dagster import faults

    monkeypatch.setattr(faults.os, "kill", _raise_crash)
    monkeypatch.setattr(faults, "_counts", type(faults._counts)())
    with pytest.raises(Crash):
        stage.range(10, 20)
    monkeypatch.delenv("KBQE_CRASH_AT")
    committed = any(n.endswith(".10.29.done") for n in stage.names())
    if not committed:
        _retry_until_committed(stage, 10, 20)
    assert _offsets(stage.writer.table_rows("acme", "clicks")) == list(range(0, 30, 2))
    assert _offsets(stage.loaded_rows("views")) == list(range(1, 30, 2))
    assert len(stage.writer.streams) == 1
    assert ranges_to_roll_forward(stage.names()) == ()


def _raise_crash(pid: int, sig: int) -> None:
    raise Crash("KBQE_CRASH_AT")


def test_a_kill_between_two_requests_then_a_retry_skips_what_is_there(tmp_path, monkeypatch):
    from kbqe_dagster.delivery import rows

    monkeypatch.setattr(rows, "CHUNK_RECORDS", 2)  # 2 records per request
    writer = FakeStorageWriter()
    stage = Stage(tmp_path, writer)
    writer.crash_after = 2
    with pytest.raises(Crash):
        stage.range(0, 12)  # clicks: 6 records, 3 requests; killed after the second
    assert [o for _, o, _ in writer.appends()] == [0, 2]
    stage.range(0, 12)
    assert [(o, n) for _, o, n in writer.appends()][2:] == [(0, 2), (2, 2), (4, 2)]
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10]


def test_a_zombie_of_the_same_intent_appends_nothing_twice(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    # A second writer of the same range after the first committed (a zombie task): its
    # appends answer already_exists, and it does not commit (the load table's avro file
    # under the committed name is another writer's).
    zombie = stage.range(0, 10)
    assert zombie.conflict and zombie.committed_last is None
    assert _offsets(stage.writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8]
    assert zombie.delivered[0].skipped_requests == 1


def test_a_stream_short_of_where_the_intent_says_fails_the_range_naming_it(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    (stream,) = stage.writer.streams
    stage.writer.streams[stream].rows.pop()  # rows the done file counts are not there
    with pytest.raises(
        StagingError,
        match=r"acme\.clicks stream .*s1, web\.events\[0\] "
        r"10\.\.19 .* row 5: the stream is not where",
    ):
        stage.range(10, 10)
    assert ranges_to_roll_forward(stage.names()) == (OffsetRange(TOPIC, 0, 10, 20),)


def test_rows_of_a_foreign_writer_at_a_new_intent_s_offsets_are_never_skipped(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    (stream,) = stage.writer.streams
    stage.writer.streams[stream].rows.append(b"")  # a foreign writer appended a row
    with pytest.raises(
        StagingError,
        match=r"row 5: the stream already holds rows at offsets "
        r"this new intent claims",
    ):
        stage.range(10, 10)


# --- a stream gone (the emulator restarted, BigQuery garbage-collected it) ---------------------
def _intent_of(stage: Stage, first: int, last: int) -> dict:
    return json.loads(stage.store.read_bytes(f"web.events.0.acme.clicks.7.{first}.{last}.intent"))


def test_a_stream_gone_between_ranges_gives_the_next_range_a_new_stream(tmp_path):
    stage = Stage(tmp_path)
    stage.range(0, 10)
    stage.writer.forget_streams()
    second = stage.range(10, 6)
    assert (second.delivered[0].first_row, second.delivered[0].rows) == (0, 3)
    assert _offsets(stage.writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert "delivered_before" not in _intent_of(stage, 10, 15)


@pytest.mark.parametrize("killed_after_appends", [0, 1, 2])
def test_an_open_intent_whose_stream_is_gone_is_replaced_and_nothing_is_appended_twice(
    tmp_path, monkeypatch, killed_after_appends
):
    # clicks: 6 records, 3 requests of 2; killed after 0, 1 or 2 of them landed, then every
    # stream is forgotten (the rows stay in the table): the retry must not fail on the gone
    # stream forever, and must not append again what the table holds.
    from kbqe_dagster.delivery import rows

    monkeypatch.setattr(rows, "CHUNK_RECORDS", 2)
    writer = FakeStorageWriter()
    stage = Stage(tmp_path, writer)
    writer.crash_after = killed_after_appends or None
    if killed_after_appends:
        with pytest.raises(Crash):
            stage.range(0, 12)
    else:
        _kill_at(monkeypatch, "storage_write_intent", lambda: stage.range(0, 12))
    (gone,) = writer.streams
    writer.forget_streams()
    result = stage.range(0, 12)
    held = list(range(0, 4 * killed_after_appends, 2))
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10]
    intent = _intent_of(stage, 0, 11)
    assert intent["stream"] != gone and intent["offset"] == 0
    assert intent.get("delivered_before", []) == held
    assert intent["parts"] == [[7, 6 - len(held)]]
    assert result.committed_last == 11 and ranges_to_roll_forward(stage.names()) == ()
    (delivery,) = result.delivered
    assert (delivery.rows, delivery.records) == (6 - len(held), 6 - len(held))
    # The next range continues the new stream after the rows it holds.
    assert stage.range(12, 2).delivered[0].first_row == 6 - len(held)


def test_a_retry_of_a_replaced_intent_skips_what_it_recorded_not_what_the_table_holds(
    tmp_path, monkeypatch
):
    from kbqe_dagster.delivery import rows

    monkeypatch.setattr(rows, "CHUNK_RECORDS", 2)
    writer = FakeStorageWriter()
    stage = Stage(tmp_path, writer)
    writer.crash_after = 1
    with pytest.raises(Crash):
        stage.range(0, 12)  # offsets 0, 2 in the table
    writer.forget_streams()
    writer.crash_after = writer_appends(writer) + 1  # the retry: offsets 4, 6 land, killed
    with pytest.raises(Crash):
        stage.range(0, 12)
    assert _intent_of(stage, 0, 11)["delivered_before"] == [0, 2]
    stage.range(0, 12)  # the replaced intent's stream lives: already_exists, then the rest
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10]
    assert len(writer.streams) == 1


def test_a_crash_after_the_gone_intent_was_deleted_still_appends_nothing_twice(
    tmp_path, monkeypatch
):
    from kbqe_dagster.delivery import rows

    monkeypatch.setattr(rows, "CHUNK_RECORDS", 2)
    writer = FakeStorageWriter()
    stage = Stage(tmp_path, writer)
    stage.range(0, 4)
    writer.crash_after = writer_appends(writer) + 1
    with pytest.raises(Crash):
        stage.range(4, 12)  # offsets 4, 6 of clicks in the table
    writer.forget_streams()
    stage.store.delete("web.events.0.acme.clicks.7.4.15.intent")  # the crash's window
    assert ranges_to_roll_forward(stage.names()) == ()
    # Planned like any uncommitted range (here: longer), and checked against the table.
    result = stage.range(4, 14)
    assert _offsets(writer.table_rows("acme", "clicks")) == list(range(0, 18, 2))
    assert _intent_of(stage, 4, 17)["delivered_before"] == [4, 6]
    assert result.delivered[0].rows == 5


def writer_appends(writer: FakeStorageWriter) -> int:
    return len(writer.appends())


def test_two_writers_replacing_one_gone_intent_agree_on_one_new_stream(tmp_path, monkeypatch):
    from kbqe_dagster.delivery import rows

    monkeypatch.setattr(rows, "CHUNK_RECORDS", 2)
    writer = FakeStorageWriter()
    stage = Stage(tmp_path, writer)
    writer.crash_after = 1
    with pytest.raises(Crash):
        stage.range(0, 12)
    (gone,) = writer.streams
    writer.forget_streams()
    real_state, other = writer.stream_state, []

    def raced_state(stream: str):
        # The late writer read the intent; the other writer replaces it and commits now.
        if stream == gone and not other:
            other.append(None)
            other[0] = stage.range(0, 12)
        return real_state(stream)

    monkeypatch.setattr(writer, "stream_state", raced_state)
    late = stage.range(0, 12)
    assert other[0].committed_last == 11
    assert late.conflict and late.committed_last is None
    # The late writer's guarded delete failed: it used the other's new intent and stream
    # instead of deleting it and opening a third stream.
    assert len(writer.streams) == 1
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 4, 6, 8, 10]


def test_refusal_notes_of_a_gone_stream_are_deleted_and_the_rows_refused_again(tmp_path):
    writer = FakeStorageWriter(refuse=_refuse_by_offset(4))
    stage = Stage(tmp_path, writer)
    writer.crash_after = 2  # the refused request noted, its other rows appended, killed
    with pytest.raises(Crash):
        stage.range(0, 10)
    (note,) = [n for n in stage.names() if n.endswith(".refused")]
    writer.forget_streams()
    result = stage.range(0, 10)
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 6, 8]
    assert _intent_of(stage, 0, 9)["delivered_before"] == [0, 2, 6, 8]
    assert result.dead_letters == {"storage_write_refused": 1}
    # The stale note was deleted and the same name now holds the new stream's refusal.
    (renoted,) = [n for n in stage.names() if n.endswith(".refused")]
    stream = _intent_of(stage, 0, 9)["stream"]
    assert renoted == note and json.loads(stage.store.read_bytes(renoted))["stream"] == stream


def test_the_table_is_asked_only_before_a_new_stream(tmp_path):
    stage = Stage(tmp_path)
    keeper = stage.keeper_settings.keeper()
    stage.range(0, 10)
    stage.range(10, 10)
    assert keeper.asked == [("acme", "clicks", 0, 0, 9)]


def _kill_at(monkeypatch, point: str, run) -> None:
    from kbqe_dagster import faults

    monkeypatch.setenv("KBQE_CRASH_AT", f"{point}:1")
    monkeypatch.setattr(faults.os, "kill", _raise_crash)
    monkeypatch.setattr(faults, "_counts", type(faults._counts)())
    with pytest.raises(Crash):
        run()
    monkeypatch.delenv("KBQE_CRASH_AT")


# --- rows the API refuses ----------------------------------------------------------------------
def test_refused_rows_are_dead_lettered_with_the_api_s_reason_and_the_rest_appended(tmp_path):
    writer = FakeStorageWriter(refuse=lambda row: None)
    stage = Stage(tmp_path, writer)
    stage.range(0, 2)
    writer.refuse = _refuse_by_offset(4)
    result = stage.range(2, 8)  # clicks: offsets 2, 4, 6, 8; 4 refused
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 6, 8]
    assert result.dead_letters == {"storage_write_refused": 1}
    (delivery,) = result.delivered
    assert (delivery.first_row, delivery.rows, delivery.records, delivery.refused) == (1, 3, 4, 1)
    letters = [
        r
        for n in stage.names()
        if n.startswith(TOPIC) and ".kbqe_dead_letters." in n and n.endswith(".avro")
        for r in fastavro.reader(io.BytesIO(stage.store.read_bytes(n)))
    ]
    assert [(d["reason"], d["offset"]) for d in letters] == [("storage_write_refused", 4)]
    assert "refused by the Storage Write API: offset 4 refused" in letters[0]["error"]
    assert any(n.endswith(".refused") for n in stage.names())
    # The next range continues after the rows the stream really holds.
    writer.refuse = lambda row: None
    assert stage.range(10, 2).delivered[0].first_row == 4


def test_a_retry_after_a_refusal_counts_the_rows_the_stream_holds(tmp_path, monkeypatch):
    writer = FakeStorageWriter(refuse=_refuse_by_offset(4))
    stage = Stage(tmp_path, writer)
    writer.crash_after = 2  # the refused request, then its other rows: killed before the done
    with pytest.raises(Crash):
        stage.range(0, 10)
    writer.refuse = lambda row: None  # even if the API would now take it, the note decides
    result = stage.range(0, 10)
    assert _offsets(writer.table_rows("acme", "clicks")) == [0, 2, 6, 8]
    assert result.dead_letters == {"storage_write_refused": 1}
    assert (result.delivered[0].rows, result.delivered[0].refused) == (4, 1)
    assert stage.range(10, 2).delivered[0].first_row == 4


def _refuse_by_offset(offset: int):
    """Refuse the row whose Kafka offset is ``offset`` (the rows carry the offset column)."""

    def refuse(row: bytes) -> str | None:
        return f"offset {offset} refused" if _row_offset(row) == offset else None

    return refuse


def _row_offset(row: bytes) -> int | None:
    from google.protobuf.internal.decoder import _DecodeVarint

    position = 0
    while position < len(row):
        tag, position = _DecodeVarint(row, position)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, position = _DecodeVarint(row, position)
            if number == OFFSET_FIELD:
                return value
        elif wire == 2:
            size, position = _DecodeVarint(row, position)
            position += size
        elif wire == 1:
            position += 8
        elif wire == 5:
            position += 4
    return None


def _offset_field_number() -> int:
    from kbqe_dagster.core.formats.avro_proto import proto_schema
    from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema

    descriptor = proto_schema(extended_schema(SCHEMA, EnrichmentConfig()))
    return next(f.number for f in descriptor.field if f.name == "_kafka_offset")


OFFSET_FIELD = _offset_field_number()


def test_the_sink_factory_pickles_for_the_spark_tasks(tmp_path):
    import pickle

    writer, keeper = fake_storage_write(str(tmp_path))
    factory = delivery_sink(_pipeline(), writer, keeper)
    assert isinstance(factory, DeliverySinkFactory)
    assert pickle.loads(pickle.dumps(factory)) == factory


def test_a_storage_write_pipeline_without_api_settings_is_an_error_naming_the_file():
    with pytest.raises(
        StagingError,
        match="delivered by storage_write but the stage run has no Storage Write settings",
    ):
        delivery_sink(_pipeline(), None, None)
