"""The load coordinator against a fake BigQuery client at the boundary (DESIGN.md §4): every
staged record is loaded exactly once, avro files are deleted only after their job succeeded,
a job id is recorded before it is submitted, recorded jobs BigQuery does not know are
resubmitted under their id, failures are retried then quarantined, and slow jobs are
reported. Tests named ``test_emulator_gap_*`` cover behaviour the local emulator cannot show
(DESIGN.md §7): the 409 on a duplicate job id and ALLOW_FIELD_ADDITION."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest

from kbqe_dagster.core.errors import StateFileError
from kbqe_dagster.core.load.state import STATE_FILE, JobStatus, decode_state
from kbqe_dagster.core.protocol.naming import AvroFileName, DoneFileName, parse_name
from kbqe_dagster_tests.loading.conftest import (
    DEAD_LETTERS,
    ORDERS_V1,
    ORDERS_V2,
    PAGE_VIEWS,
    TOPIC,
    pipeline,
)
from kbqe_dagster_tests.loading.staged import stage_range

DAY1, DAY2 = date(2024, 9, 12), date(2024, 9, 13)


def files(store, kind=None) -> set[str]:
    names = {f.name for f in store.list()}
    if kind is None:
        return names
    return {n for n in names if isinstance(parse_name(n), kind)}


def loaded(bq, table) -> list[tuple[int, int]]:
    return sorted(
        (r["_kafka_partition"], r["_kafka_offset"]) for r in bq.rows(table.dataset, table.table)
    )


def stage_two_tables(store):
    """Partition 0: offsets 0..9 (4 orders, 5 page views, 1 gap), 10..14 (5 orders);
    partition 1: 0..2 (3 page views)."""
    a = stage_range(store, TOPIC, 0, 0, 9, [(ORDERS_V1, 4, DAY1), (PAGE_VIEWS, 5, DAY2)])
    b = stage_range(store, TOPIC, 0, 10, 14, [(ORDERS_V1, 5, DAY2)])
    c = stage_range(store, TOPIC, 1, 0, 2, [(PAGE_VIEWS, 3, DAY1)])
    return a, b, c


def test_a_cycle_loads_every_staged_record_once_and_deletes_only_the_avro_files(
    store, bq, make_coordinator
) -> None:
    stage_two_tables(store)
    done_before = files(store, DoneFileName)

    report = make_coordinator().run_cycle()

    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(4)] + [(0, o) for o in range(10, 15)]
    assert loaded(bq, PAGE_VIEWS) == [(0, o) for o in range(4, 9)] + [(1, o) for o in range(3)]
    assert files(store, AvroFileName) == set()
    assert files(store, DoneFileName) == done_before
    assert [
        (c.job.table, c.rows_check.expected, c.rows_check.loaded) for c in report.completed
    ] == [("orders", 9, 9), ("page_views", 8, 8)]
    state = decode_state(store.read_bytes(STATE_FILE))
    assert [j.status for j in state.jobs] == [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]

    again = make_coordinator().run_cycle()

    assert (again.planned, again.submitted) == ([], [])
    assert len(bq.inserts) == 2


def test_each_load_is_reported_per_day_partition_with_rows_and_offset_ranges(
    store, make_coordinator
) -> None:
    stage_two_tables(store)

    report = make_coordinator().run_cycle()

    orders = next(c for c in report.completed if c.job.table == "orders")
    assert [(p.day, p.rows, p.files, p.offset_ranges) for p in orders.partitions()] == [
        ("2024-09-12", 4, 1, ((TOPIC, 0, 0, 9),)),
        ("2024-09-13", 5, 1, ((TOPIC, 0, 10, 14),)),
    ]
    assert {p.job_id for p in orders.partitions()} == {orders.job.job_id}
    assert all(p.job_bytes and p.job_bytes > 0 for p in orders.partitions())


def test_the_state_file_lists_a_job_before_it_is_submitted(store, bq, make_coordinator) -> None:
    stage_two_tables(store)
    seen: dict[str, str] = {}

    def recorded_status(job_id: str) -> None:
        state = decode_state(store.read_bytes(STATE_FILE))
        seen[job_id] = state.job(job_id).status.value  # raises when the id is not recorded

    bq.on_insert = recorded_status
    make_coordinator().run_cycle()

    assert sorted(seen.values()) == ["planned", "planned"]
    assert set(seen) == set(bq.inserts)


def test_avro_files_stay_until_their_job_succeeds(store, bq, make_coordinator) -> None:
    stage_two_tables(store)
    avro = files(store, AvroFileName)
    bq.hold = True

    first = make_coordinator().run_cycle()
    second = make_coordinator().poll()

    assert len(first.submitted) == 2 and first.completed == [] and second.completed == []
    assert files(store, AvroFileName) == avro
    assert second.pending_after == 2

    bq.finish()
    third = make_coordinator().poll()

    assert len(third.completed) == 2 and third.pending_after == 0
    assert files(store, AvroFileName) == set()
    assert len(loaded(bq, ORDERS_V1)) == 9


class _Killed(Exception):
    """The coordinator process dies here."""


@pytest.mark.parametrize("crash", ["insert_never_answered", "process_died_before_insert"])
def test_a_recorded_job_unknown_to_bigquery_is_resubmitted_under_its_recorded_id(
    store, bq, make_coordinator, crash
) -> None:
    stage_range(store, TOPIC, 0, 0, 4, [(ORDERS_V1, 5, DAY1)])
    if crash == "insert_never_answered":
        bq.unanswered_inserts = 1
        first = make_coordinator().run_cycle()
        assert first.transient == [j.job_id for j in first.planned]
    else:

        def die(job_id: str) -> None:
            bq.on_insert = None
            raise _Killed(job_id)

        bq.on_insert = die
        with pytest.raises(_Killed):
            make_coordinator().run_cycle()
    recorded = decode_state(store.read_bytes(STATE_FILE)).jobs[0]
    assert (recorded.status, bq.jobs) == (JobStatus.PLANNED, {})

    report = make_coordinator().poll()

    assert report.resubmitted == [recorded.job_id]
    assert bq.inserts == [recorded.job_id, recorded.job_id]
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(5)]
    assert files(store, AvroFileName) == set()


def test_emulator_gap_409_duplicate_job_id_means_already_submitted(
    store, bq, make_coordinator
) -> None:
    """BigQuery answers 409 Conflict to a job id it already has (the emulator re-runs the
    job instead). A process killed after submitting but before recording it, restarted
    while BigQuery's job lookup still lags, resubmits the id: the 409 marks it submitted
    and the rows are loaded once."""
    stage_range(store, TOPIC, 0, 0, 4, [(ORDERS_V1, 5, DAY1)])
    bq.hold = True
    coordinator = make_coordinator()
    real_submit = coordinator.bigquery.submit_load

    def submit_then_die(request):
        real_submit(request)
        raise _Killed(request.job_id)

    coordinator.bigquery.submit_load = submit_then_die
    with pytest.raises(_Killed):
        coordinator.run_cycle()
    job_id = decode_state(store.read_bytes(STATE_FILE)).jobs[0].job_id
    bq.hidden.add(job_id)  # the restarted process's first lookup does not find it yet

    report = make_coordinator().poll()

    assert report.already_submitted == [job_id]
    assert decode_state(store.read_bytes(STATE_FILE)).job(job_id).status is JobStatus.SUBMITTED
    bq.finish()
    assert len(make_coordinator().poll().completed) == 1
    assert bq.inserts == [job_id, job_id]
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(5)]


def test_emulator_gap_field_addition_a_newer_schema_widens_the_table_by_name(
    store, bq, make_coordinator
) -> None:
    """With ALLOW_FIELD_ADDITION BigQuery adds the new nullable ``coupon`` column and
    matches fields by name; older-schema files keep loading with NULL there. The emulator
    ignores the option and matches by position."""
    stage_range(store, TOPIC, 0, 0, 2, [(ORDERS_V1, 3, DAY1)])
    stage_range(store, TOPIC, 0, 3, 4, [(ORDERS_V2, 2, DAY2)])

    make_coordinator().run_cycle()
    stage_range(store, TOPIC, 0, 5, 5, [(ORDERS_V1, 1, DAY2)])
    make_coordinator().run_cycle()

    rows = sorted(bq.rows("acme_sales", "orders"), key=lambda r: r["_kafka_offset"])
    assert [(r["_kafka_offset"], r["orderId"], r["coupon"]) for r in rows] == [
        (0, "o-0", None),
        (1, "o-1", None),
        (2, "o-2", None),
        (3, "o-3", "WELCOME"),
        (4, "o-4", "WELCOME"),
        (5, "o-5", None),
    ]
    jobs = [bq.jobs[i] for i in bq.inserts]
    assert [j.uris[0].rsplit("/", 1)[-1].split(".")[-3] for j in jobs] == ["11", "12", "11"]
    assert all(
        j.config.schema_update_options == ["ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"]
        for j in jobs
    )
    assert [bool(j.config.schema) for j in jobs] == [True, False, False], (
        "only the job that creates the table carries a schema"
    )


def test_a_failing_table_is_retried_under_new_ids_then_quarantined_while_others_load(
    store, bq, make_coordinator
) -> None:
    stage_two_tables(store)
    orders_files = {n for n in files(store, AvroFileName) if ".orders." in n}
    bq.fail_tables[("acme_sales", "orders")] = 99

    report = make_coordinator().run_cycle()

    assert len(report.retried) == 2 and len(report.quarantined) == 1
    quarantined = report.quarantined[0]
    assert len(set(quarantined.job.attempt_ids)) == 3
    assert set(quarantined.job.attempt_ids) <= set(bq.inserts)
    assert files(store, AvroFileName) == orders_files, "quarantined files stay, others loaded"
    assert len(loaded(bq, PAGE_VIEWS)) == 8
    assert report.quarantined_tables == frozenset({("acme_sales", "orders")})
    note = json.loads(store.read_bytes(quarantined.note))
    assert (note["error"], set(note["files"])) == ("injected failure", orders_files)
    assert quarantined.note.startswith("_kbqe/quarantine/acme_sales.orders/")

    later = make_coordinator().run_cycle()

    assert later.planned == [] and len(bq.inserts) == 4, "quarantined files are not replanned"


def test_a_load_that_fails_once_is_retried_and_loaded_once(store, bq, make_coordinator) -> None:
    stage_range(store, TOPIC, 0, 0, 4, [(ORDERS_V1, 5, DAY1)])
    bq.fail_tables[("acme_sales", "orders")] = 1

    report = make_coordinator().run_cycle()

    assert len(report.retried) == 1 and len(report.completed) == 1
    assert len(report.completed[0].job.attempt_ids) == 2
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(5)]


@pytest.mark.parametrize("entry", ["poll", "run_cycle"])
def test_a_job_running_too_long_is_reported_once_never_resubmitted(
    store, bq, clock, make_coordinator, entry
) -> None:
    stage_range(store, TOPIC, 0, 0, 4, [(ORDERS_V1, 5, DAY1)])
    bq.hold = True
    make_coordinator(stuck_after=timedelta(minutes=30)).run_cycle()
    clock.advance(timedelta(hours=2))

    report = getattr(make_coordinator(stuck_after=timedelta(minutes=30)), entry)()

    assert len(report.stuck) == 1 and "check it in BigQuery" in report.stuck[0]
    assert len(bq.inserts) == 1
    assert len(files(store, AvroFileName)) == 1


def test_an_unreadable_state_file_stops_loading(store, bq, make_coordinator) -> None:
    stage_two_tables(store)
    store.put_bytes(STATE_FILE, b"{not json")

    with pytest.raises(StateFileError, match="Loading is stopped"):
        make_coordinator().run_cycle()

    assert bq.inserts == [] and len(files(store, AvroFileName)) == 4


def test_max_files_per_job_spreads_a_backlog_over_cycles(store, bq, make_coordinator) -> None:
    for first in (0, 10, 20):
        stage_range(store, TOPIC, 0, first, first + 9, [(ORDERS_V1, 10, DAY1)])
    config = pipeline(max_files_per_job=2)

    first = make_coordinator(config).run_cycle()
    second = make_coordinator(config).run_cycle()

    assert [len(j.files) for j in first.planned] == [2]
    assert [len(j.files) for j in second.planned] == [1]
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(30)]


def test_dead_letters_load_into_their_table_partitioned_by_staged_date(
    store, bq, make_coordinator
) -> None:
    stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 2, DAY1), (DEAD_LETTERS, 2, DAY2)])

    make_coordinator().run_cycle()

    dead = bq.tables[("kbqe_dead_letters", "dead_letters")]
    assert sorted(r["offset"] for r in dead.rows) == [2, 3]
    assert dead.time_partitioning_field == "staged_date"
    assert bq.tables[("acme_sales", "orders")].time_partitioning_field == "_event_date"
    assert "kbqe_dead_letters" in bq.datasets


def test_scala_era_done_files_load_with_unknown_counts(store, bq, make_coordinator) -> None:
    stage_range(store, TOPIC, 0, 0, 4, [(ORDERS_V1, 5, DAY1)], scala_done=True)

    report = make_coordinator().run_cycle()

    completed = report.completed[0]
    assert (completed.job.records, completed.rows_check.passed) == (None, None)
    assert [(p.day, p.rows) for p in completed.partitions()] == [(None, 5)]
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(5)]


# --- pinned versions: a late zombie's re-upload is a leftover, never loaded twice ----------
def uploads_of(store, names) -> dict[str, bytes]:
    return {name: store.read_bytes(name) for name in names}


def reupload(store, uploads: dict[str, bytes], *names: str) -> None:
    """What a late zombie does: the same bytes under a committed name, after its load."""
    for name in names:
        store.put_bytes(name, uploads[name])


def test_a_file_recreated_under_a_loaded_name_is_deleted_as_a_leftover_not_loaded_again(
    store, bq, make_coordinator
) -> None:
    staged = stage_range(store, TOPIC, 0, 0, 9, [(ORDERS_V1, 4, DAY1), (PAGE_VIEWS, 5, DAY2)])
    uploads = uploads_of(store, staged.avro)
    make_coordinator().run_cycle()
    assert files(store, AvroFileName) == set()
    reupload(store, uploads, *staged.avro)

    report = make_coordinator().run_cycle()

    assert sorted(report.leftovers_deleted) == sorted(staged.avro)
    assert (report.planned, report.submitted) == ([], [])
    assert files(store, AvroFileName) == set()
    assert files(store, DoneFileName) == set(staged.done)
    assert len(bq.inserts) == 2  # the two first loads, nothing more
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(4)]
    assert "leftover(s) deleted" in report.summary()


def test_a_leftover_leaves_the_pinned_files_of_the_same_table_loading(
    store, bq, make_coordinator
) -> None:
    first = stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 4, DAY1)])
    uploads = uploads_of(store, first.avro)
    make_coordinator().run_cycle()
    reupload(store, uploads, first.avro[0])
    stage_range(store, TOPIC, 0, 4, 8, [(ORDERS_V1, 5, DAY1)])

    report = make_coordinator().run_cycle()

    assert report.leftovers_deleted == [first.avro[0]]
    assert [c.job.files for c in report.completed] == [
        ("com.acme.events.0.acme_sales.orders.11.4.avro",)
    ]
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(9)]


@pytest.mark.parametrize("legacy", ["scala_done", "manifest_without_versions"])
def test_commits_that_pin_nothing_load_by_name_as_before(
    store, bq, make_coordinator, legacy: str
) -> None:
    options = {"scala_done": True} if legacy == "scala_done" else {"pin_versions": False}
    stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 4, DAY1)], **options)

    report = make_coordinator().run_cycle()

    assert report.leftovers_deleted == []
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(4)]


def test_the_runbook_replay_of_a_range_loads_it_once_more_under_new_pins(
    store, bq, make_coordinator
) -> None:
    """docs/runbook.md "Replay a range": delete the rows, delete the range's done files, and
    the stage job stages it again; the new commit pins new objects, which load once."""
    stage_range(store, TOPIC, 0, 0, 9, [(ORDERS_V1, 10, DAY1)])
    replayed = stage_range(store, TOPIC, 0, 10, 14, [(ORDERS_V1, 5, DAY1)])
    make_coordinator().run_cycle()
    table = bq.tables[(ORDERS_V1.dataset, ORDERS_V1.table)]
    table.rows[:] = [r for r in table.rows if r["_kafka_offset"] < 10]  # step 2: DELETE ≥ 10
    for done in replayed.done:  # step 3: the range's done files (its avro files are loaded)
        store.delete(done)

    again = stage_range(store, TOPIC, 0, 10, 14, [(ORDERS_V1, 5, DAY1)])  # the next stage run
    report = make_coordinator().run_cycle()

    assert report.leftovers_deleted == []
    assert [c.job.files for c in report.completed] == [again.avro]
    assert loaded(bq, ORDERS_V1) == [(0, o) for o in range(15)]


def test_kbqe_load_plan_shows_the_leftovers_the_next_cycle_deletes(
    store, bq, make_coordinator
) -> None:
    from kbqe_dagster.operations.load_plan import load_plan

    staged = stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 4, DAY1)])
    uploads = uploads_of(store, staged.avro)
    make_coordinator().run_cycle()
    reupload(store, uploads, *staged.avro)
    stage_range(store, TOPIC, 0, 4, 8, [(ORDERS_V1, 5, DAY1)])

    plan = load_plan(store, pipeline())
    report = make_coordinator().run_cycle()

    assert plan.to_json()["leftovers"] == list(staged.avro) == report.leftovers_deleted
    assert [j.files for j in plan.jobs] == [c.job.files for c in report.completed]
