"""The Storage Write delivery protocol (core/protocol/delivery.py), as a specification:
names, what the intent and the refusal notes record, what each append outcome means, which
ranges recovery rolls forward and where the next range of a table continues its stream."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.commit import (
    Delivered,
    avro_file_name,
    parse_manifest,
    plan_range_commit,
)
from kbqe_dagster.core.protocol.delivery import (
    Intent,
    Refusal,
    append_decision,
    check_no_overlap,
    committed_intents,
    intent_name,
    open_intents,
    parse_intent,
    parse_refusal,
    pinned_tables,
    ranges_to_roll_forward,
    stream_position,
)
from kbqe_dagster.core.protocol.naming import (
    RefusalFileName,
    parse_listing,
    parse_name,
)
from kbqe_dagster.core.protocol.offsets import OffsetRange

NOW = datetime(2026, 11, 25, 14, 0, tzinfo=UTC)
RNG = OffsetRange("com.acme.events", 3, 100, 150)  # offsets 100..149
STREAM = "projects/p/datasets/fast/tables/clicks/streams/s1"
WHERE = "fast.clicks stream s1, com.acme.events[3] 100..149"


def _intent(
    offset: int = 0, parts=((7, 40),), rng: OffsetRange = RNG, stream: str = STREAM
) -> Intent:
    return Intent(
        rng.topic,
        rng.partition,
        "fast",
        "clicks",
        rng.start,
        rng.last,
        stream,
        offset,
        tuple(parts),
    )


# --- names ---------------------------------------------------------------------------------
def test_an_intent_is_named_like_the_done_file_it_precedes_and_parses_from_the_right() -> None:
    name = intent_name(RNG, "fast", "clicks", 7)
    assert name.name == "com.acme.events.3.fast.clicks.7.100.149.intent"
    assert parse_name(name.name) == name
    assert name.done == avro_file_name(RNG, "fast", "clicks", 7).done(149)


def test_a_refusal_note_names_its_intent_and_the_request_s_row_offset() -> None:
    note = intent_name(RNG, "fast", "clicks", 7).refusal(4096)
    assert note.name == "com.acme.events.3.fast.clicks.7.100.149.4096.refused"
    assert parse_name(note.name) == note
    assert isinstance(parse_name(note.name), RefusalFileName)
    assert note.intent == intent_name(RNG, "fast", "clicks", 7)


def test_a_listing_sorts_intents_and_refusals_apart_from_what_it_does_not_know() -> None:
    listing = parse_listing(
        [
            "com.acme.events.3.fast.clicks.7.100.149.intent",
            "com.acme.events.3.fast.clicks.7.100.149.0.refused",
            "com.acme.events.3.fast.clicks.7.100.149.done",
            "notes.txt",
        ]
    )
    assert [i.name for i in listing.intents] == ["com.acme.events.3.fast.clicks.7.100.149.intent"]
    assert len(listing.refusals) == 1 and len(listing.done) == 1
    assert listing.unrecognized == ("notes.txt",)


# --- the intent ----------------------------------------------------------------------------
def test_an_intent_records_stream_first_row_exact_kafka_range_and_rows_per_schema() -> None:
    intent = _intent(offset=500, parts=((7, 40), (9, 8)))
    back = parse_intent(intent.encode(), intent_name(RNG, "fast", "clicks", 7))
    assert back == intent
    assert (back.stream, back.offset, back.rows, back.range) == (STREAM, 500, 48, RNG)


def test_an_intent_of_another_range_under_this_name_is_refused_naming_the_file() -> None:
    other = _intent(rng=OffsetRange("com.acme.events", 3, 150, 200))
    with pytest.raises(
        StagingError,
        match=r"intent com\.acme\.events\.3\.fast\.clicks\.7\."
        r"100\.149\.intent describes",
    ):
        parse_intent(other.encode(), intent_name(RNG, "fast", "clicks", 7))


def test_an_unreadable_intent_is_an_error_naming_it() -> None:
    with pytest.raises(StagingError, match="100.149.intent is not readable"):
        parse_intent(b"{}", intent_name(RNG, "fast", "clicks", 7))


def test_a_refusal_note_round_trips() -> None:
    note = Refusal(4096, ((3, "field ts: not a timestamp"),))
    name = intent_name(RNG, "fast", "clicks", 7).refusal(4096)
    assert parse_refusal(note.encode(), name) == note


def test_an_intent_on_a_new_stream_records_the_offsets_the_table_held_already() -> None:
    intent = Intent(
        RNG.topic,
        RNG.partition,
        "fast",
        "clicks",
        RNG.start,
        RNG.last,
        STREAM,
        0,
        ((7, 37),),
        (100, 101, 104),
    )
    name = intent_name(RNG, "fast", "clicks", 7)
    assert parse_intent(intent.encode(), name) == intent
    # Without any, the intent's bytes are what they always were (older intents parse alike).
    assert b"delivered_before" not in _intent().encode()
    assert parse_intent(_intent().encode(), name).delivered_before == ()


def test_a_refusal_note_records_its_stream_and_older_notes_without_one_parse() -> None:
    name = intent_name(RNG, "fast", "clicks", 7).refusal(4096)
    note = Refusal(4096, ((3, "bad"),), STREAM)
    assert parse_refusal(note.encode(), name) == note
    older = b'{"kbqe_refusal":1,"refused":[[3,"bad"]],"row_offset":4096}\n'
    assert parse_refusal(older, name) == Refusal(4096, ((3, "bad"),))


# --- appends -------------------------------------------------------------------------------
def test_an_appended_request_advances_the_stream_by_its_rows() -> None:
    assert append_decision("appended", 40, "", (), WHERE).advance == 40


def test_already_exists_means_an_earlier_attempt_wrote_the_same_rows_skip_them() -> None:
    assert (
        append_decision("already_exists", 40, "Offset 0 already committed", (), WHERE).advance == 40
    )


def test_already_exists_after_a_refusal_counts_only_the_rows_the_api_took() -> None:
    noted = Refusal(0, ((3, "bad"), (9, "bad")))
    assert append_decision("already_exists", 40, "", (), WHERE, noted).advance == 38


def test_out_of_range_fails_the_range_naming_table_stream_and_offsets() -> None:
    with pytest.raises(
        StagingError,
        match=r"fast\.clicks stream s1, com\.acme\.events\[3\] "
        r"100\.\.149: the stream is not where the intent",
    ):
        append_decision("out_of_range", 40, "next expected 17", (), WHERE)


def test_rows_refused_writes_nothing_and_names_the_rows_with_the_api_s_reason() -> None:
    step = append_decision("rows_refused", 40, "invalid rows", ((3, "ts: bad"), (9, "")), WHERE)
    assert step.advance == 0
    assert step.refused == ((3, "ts: bad"), (9, "invalid rows"))


def test_rows_refused_without_a_row_is_an_error_not_a_stuck_retry() -> None:
    with pytest.raises(StagingError, match="without naming a row"):
        append_decision("rows_refused", 40, "schema mismatch", (), WHERE)


# --- recovery ------------------------------------------------------------------------------
INTENT = "com.acme.events.3.fast.clicks.7.100.149.intent"
DONE = "com.acme.events.3.fast.clicks.7.100.149.done"


@pytest.mark.parametrize(
    "crash, names, roll_forward",
    [
        # after staging, before the intent: nothing is recorded, no row is in the stream; the
        # range is simply planned again
        ("before the intent", [], ()),
        # after the intent, before or between appends, after the last append: the intent is open;
        # its exact range is restaged and appended at its offsets (already_exists for what is there)
        ("after the intent", [INTENT], (RNG,)),
        ("between appends", [INTENT, "com.acme.events.3.fast.clicks.7.100.149.0.refused"], (RNG,)),
        # after the done file: committed; nothing to roll forward
        ("after the done file", [INTENT, DONE], ()),
    ],
)
def test_every_crash_point_leaves_what_recovery_needs(
    crash: str, names: list[str], roll_forward: tuple
) -> None:
    assert ranges_to_roll_forward(names) == roll_forward, crash


def test_a_range_with_two_storage_write_tables_is_rolled_forward_once() -> None:
    names = [INTENT, "com.acme.events.3.fast.views.7.100.149.intent"]
    assert ranges_to_roll_forward(names) == (RNG,)
    assert len(open_intents(names)) == 2


def test_a_committed_range_s_intents_are_for_retention_only() -> None:
    names = [INTENT, DONE, "com.acme.events.3.fast.clicks.7.150.199.intent"]
    assert [i.name for i in committed_intents(names)] == [INTENT]


def _manifest(rng: OffsetRange, files: dict[tuple[str, int], Delivered | None]):
    staged = [(avro_file_name(rng, "fast", table, schema), 10) for table, schema in files]
    commit = plan_range_commit(
        rng,
        staged,
        created_at=NOW,
        delivered={avro_file_name(rng, "fast", t, s).name: d for (t, s), d in files.items() if d},
    )
    return parse_manifest(commit.content, commit.done_files[0].name)


def test_a_manifest_says_where_a_storage_write_file_s_rows_went() -> None:
    manifest = _manifest(RNG, {("clicks", 7): Delivered(STREAM, 500, 9), ("views", 7): None})
    by_table = {f.avro.split(".")[-4]: f.delivered for f in manifest.files}
    assert by_table == {"clicks": Delivered(STREAM, 500, 9), "views": None}


def test_a_load_file_s_manifest_entry_is_unchanged() -> None:
    manifest = _manifest(RNG, {("views", 7): None})
    assert b"storage_write" not in manifest.encode()


def test_the_next_range_continues_the_stream_where_the_latest_range_left_it() -> None:
    first = _manifest(OffsetRange("t", 0, 0, 100), {("clicks", 7): Delivered(STREAM, 0, 90)})
    second = _manifest(
        OffsetRange("t", 0, 100, 200),
        {("clicks", 7): Delivered(STREAM, 90, 8), ("clicks", 9): Delivered(STREAM, 98, 2)},
    )
    third = _manifest(OffsetRange("t", 0, 200, 300), {("views", 7): None})  # another table
    position = stream_position([second, third, first], "fast", "clicks")
    assert (position.stream, position.next_offset, position.schema_ids) == (
        STREAM,
        100,
        frozenset({7, 9}),
    )


def test_a_table_without_a_delivered_range_starts_a_new_stream() -> None:
    loaded = _manifest(OffsetRange("t", 0, 0, 100), {("clicks", 7): None})  # delivery: load
    assert stream_position([loaded], "fast", "clicks") is None


def test_a_table_switched_back_after_loads_starts_a_new_stream() -> None:
    appended = _manifest(OffsetRange("t", 0, 0, 100), {("clicks", 7): Delivered(STREAM, 0, 90)})
    loaded = _manifest(OffsetRange("t", 0, 100, 200), {("clicks", 7): None})  # switched to load
    other = _manifest(OffsetRange("t", 0, 200, 300), {("views", 7): None})  # not this table
    assert stream_position([appended, loaded, other], "fast", "clicks") is None
    again = _manifest(OffsetRange("t", 0, 300, 400), {("clicks", 7): Delivered("s2", 0, 5)})
    position = stream_position([again, appended, loaded], "fast", "clicks")
    assert (position.stream, position.next_offset) == ("s2", 5)


def test_the_tables_an_open_intent_pins_are_its_range_s() -> None:
    names = [
        INTENT,
        "com.acme.events.3.fast.views.7.100.149.intent",
        DONE.replace("100.149", "50.99"),
        "com.acme.events.3.fast.orders.7.50.99.intent",
    ]
    assert pinned_tables(open_intents(names)) == {
        ("com.acme.events", 3, 100, "fast", "clicks"),
        ("com.acme.events", 3, 100, "fast", "views"),
    }


def test_two_ranges_never_claim_the_same_rows_of_a_stream() -> None:
    ours = _intent(offset=100, parts=((7, 50),))
    foreign = _intent(offset=120, parts=((7, 10),), rng=OffsetRange("com.acme.events", 3, 150, 160))
    with pytest.raises(StagingError, match=r"would append rows 100\.\.149 .* which intent x"):
        check_no_overlap(ours, {"x": foreign})
    check_no_overlap(ours, {"same range": ours})  # its own intent, as read back
    check_no_overlap(ours, {"other stream": _intent(offset=120, stream="s2")})


# --- planning ------------------------------------------------------------------------------
def _plan(per_range: int = 100):
    from kbqe_dagster.core.protocol.offsets import Watermarks, plan_ranges, recover

    names = ["t.0.d.x.1.0.99.done", "t.1.d.x.1.0.99.done"]
    marks = {("t", 0): Watermarks(0, 500), ("t", 1): Watermarks(0, 500)}
    return plan_ranges(
        recover(names), marks, max_messages_per_run=400, max_messages_per_range=per_range
    )


def test_a_topic_feeding_a_storage_write_table_stages_one_range_per_partition() -> None:
    from kbqe_dagster.core.protocol.delivery import plan_with_deliveries

    plan = plan_with_deliveries(_plan(), (), one_range_per_partition=True)
    assert plan.ranges == (OffsetRange("t", 0, 100, 200), OffsetRange("t", 1, 100, 200))
    assert [p.backlog_after_run for p in plan.partitions] == [300, 300]


def test_an_open_intent_s_exact_range_is_restaged_first_and_alone_in_its_partition() -> None:
    from kbqe_dagster.core.protocol.delivery import plan_with_deliveries

    open_range = OffsetRange("t", 1, 100, 137)  # covered less than it was planned
    plan = plan_with_deliveries(_plan(), (open_range,), one_range_per_partition=False)
    assert plan.ranges[0] == open_range
    assert [r for r in plan.ranges if r.partition == 1] == [open_range]
    assert len([r for r in plan.ranges if r.partition == 0]) == 4  # a load-only topic splits


def test_without_storage_write_the_plan_is_unchanged() -> None:
    from kbqe_dagster.core.protocol.delivery import plan_with_deliveries

    assert plan_with_deliveries(_plan(), (), one_range_per_partition=False) == _plan()


# --- retention -----------------------------------------------------------------------------
def test_retention_deletes_a_committed_range_s_intent_and_notes_before_any_done_file() -> None:
    from kbqe_dagster.core.protocol.retention_plan import plan_retention

    names = [
        "t.0.d.x.1.0.9.intent",
        "t.0.d.x.1.0.9.3.refused",
        "t.0.d.x.1.0.9.done",
        "t.0.d.x.1.10.19.intent",
        "t.0.d.x.1.10.19.done",
        "t.0.d.x.1.20.29.intent",  # open: rolled forward by the next run, never deleted
    ]
    plan = plan_retention(names)
    assert plan.delete == (
        "t.0.d.x.1.0.9.3.refused",
        "t.0.d.x.1.0.9.intent",
        "t.0.d.x.1.10.19.intent",
        "t.0.d.x.1.0.9.done",
    )
    # A storage_write done file has no avro file: loaded, as far as retention is concerned;
    # the newest range's is kept (resume point).
    assert [k.name for k in plan.keep] == ["t.0.d.x.1.10.19.done"]


def test_an_intent_left_below_the_done_files_by_an_interrupted_retention_is_not_open() -> None:
    names = ["t.0.d.x.1.0.9.intent", "t.0.d.x.1.10.19.done"]  # 0..9's done file deleted
    assert open_intents(names) == ()
    assert ranges_to_roll_forward(names) == ()
