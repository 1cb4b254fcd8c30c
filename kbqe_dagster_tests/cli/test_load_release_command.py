"""``kbqe load release``: quarantined files of one table become loadable again — all of them,
or those named with ``--file``. Without ``--yes`` it is a dry run; refusals write nothing and
are one line; quarantine notes stay; the previous state goes to the backup."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from kbqe_dagster.core.load.selection import PlannedLoadJob
from kbqe_dagster.core.load.state import (
    STATE_BACKUP,
    STATE_FILE,
    decode_state,
    quarantine_job,
    record_planned,
)
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import (
    CREATED,
    DEAD_P1,
    ORDERS_3_P0,
    ORDERS_3_P1,
    ORDERS_4_P0,
    VIEWS_P0,
    Area,
    T,
    state_with_pending_and_quarantine,
    write_state,
)
from kbqe_dagster_tests.support.cli import assert_one_error_line

ORDERS = "acme_sales.orders"
NOTE = "_kbqe/quarantine/acme_sales.orders/kbqe_acme_sales_orders_1.json"
REMINDER = "kbqe: note: pause the load_cycle and poll_load_jobs schedules"


@pytest.fixture
def quarantined(area: Area) -> Area:
    """Besides orders schema 4 at partition 0 (the area's own quarantine): orders schema 3 at
    partitions 0 and 1 (a second job of the same table), and the dead letters (another
    table); plus the note the coordinator wrote for the first job."""
    state = state_with_pending_and_quarantine()
    later = CREATED + timedelta(hours=2)
    for job_id, job in (
        (
            "kbqe_acme_sales_orders_2",
            PlannedLoadJob(
                "acme_sales",
                "orders",
                3,
                (ORDERS_3_P0, ORDERS_3_P1),
                (f"{T}.0.acme_sales.orders.3.0.99.done", f"{T}.1.acme_sales.orders.3.0.49.done"),
            ),
        ),
        (
            "kbqe_dead_letters_1",
            PlannedLoadJob(
                "kbqe_dead_letters",
                "dead_letters",
                0,
                (DEAD_P1,),
                (f"{T}.1.kbqe_dead_letters.dead_letters.0.0.49.done",),
            ),
        ),
    ):
        state = record_planned(state, job, job_id, CREATED)
        state = quarantine_job(state, job_id, later, "Access Denied")
    write_state(area.root, state)
    note = area.root / NOTE
    note.parent.mkdir(parents=True)
    note.write_text('{"error": "Provided Schema does not match Table"}\n')
    return area


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def quarantined_now(root: Path) -> set[str]:
    return set(decode_state((root / STATE_FILE).read_bytes()).quarantined_files())


def planned_files(run: Run, root: Path) -> set[str]:
    plan = run("load", "plan", "--staging", str(root), "--json").json()
    return {f for job in plan["jobs"] for f in job["files"]}


@pytest.mark.parametrize(
    ("named", "released"),
    [
        ((), {ORDERS_4_P0, ORDERS_3_P0, ORDERS_3_P1}),
        ((ORDERS_3_P0,), {ORDERS_3_P0}),
        ((ORDERS_4_P0, ORDERS_3_P1), {ORDERS_4_P0, ORDERS_3_P1}),
    ],
    ids=["all of the table", "one named", "two named of two jobs"],
)
def test_yes_releases_exactly_these_files_and_the_next_plan_loads_them(
    run: Run, quarantined: Area, named: tuple[str, ...], released: set[str]
) -> None:
    root = quarantined.root
    before = quarantined_now(root)
    options = [arg for name in named for arg in ("--file", name)]
    report = run(
        "load", "release", "--staging", str(root), "--table", ORDERS, *options, "--yes", "--json"
    ).json()
    assert report["dry_run"] is False
    assert {r["file"] for r in report["released"]} == released
    assert quarantined_now(root) == before - released
    planned = planned_files(run, root)
    assert released <= planned
    assert not planned & (before - released)


def test_the_dry_run_shows_the_release_and_changes_nothing(run: Run, quarantined: Area) -> None:
    root = quarantined.root
    before = files_of(root)
    report = run("load", "release", "--staging", str(root), "--table", ORDERS, "--json").json()
    assert report["dry_run"] is True
    assert [(r["file"], r["job_id"]) for r in report["released"]] == [
        (ORDERS_4_P0, "kbqe_acme_sales_orders_1"),
        (ORDERS_3_P0, "kbqe_acme_sales_orders_2"),
        (ORDERS_3_P1, "kbqe_acme_sales_orders_2"),
    ]
    assert files_of(root) == before
    assert not planned_files(run, root) & {ORDERS_4_P0, ORDERS_3_P0, ORDERS_3_P1}


def test_the_text_dry_run_says_how_to_release_and_why_the_files_are_held(
    run: Run, quarantined: Area
) -> None:
    result = run(
        "load",
        "release",
        "--staging",
        str(quarantined.root),
        "--table",
        ORDERS,
        "--file",
        ORDERS_4_P0,
    )
    lines = result.out.splitlines()
    assert result.code == 0
    assert lines[0] == (
        f"{ORDERS} in {quarantined.root}: would release 1 of 3 quarantined "
        "file(s) (dry run, nothing changed; --yes releases them)"
    )
    assert f"  {ORDERS_4_P0}" in lines
    assert (
        "  kbqe_acme_sales_orders_1 (quarantined 2024-09-13T13:00:00+00:00): "
        "Provided Schema does not match Table"
    ) in lines
    assert lines[lines.index("still quarantined (2):") + 1 :][:2] == [
        f"  {ORDERS_3_P0}",
        f"  {ORDERS_3_P1}",
    ]


@pytest.mark.parametrize("write", [False, True], ids=["dry run", "--yes"])
def test_every_run_reminds_to_pause_the_load_schedules(
    run: Run, quarantined: Area, write: bool
) -> None:
    result = run(
        "load",
        "release",
        "--staging",
        str(quarantined.root),
        "--table",
        ORDERS,
        *(["--yes"] if write else []),
    )
    assert result.code == 0
    assert result.err.startswith(REMINDER)


def test_the_previous_state_goes_to_the_backup_and_the_notes_stay(
    run: Run, quarantined: Area
) -> None:
    root = quarantined.root
    previous = (root / STATE_FILE).read_bytes()
    note = (root / NOTE).read_bytes()
    assert run("load", "release", "--staging", str(root), "--table", ORDERS, "--yes").code == 0
    assert (root / STATE_BACKUP).read_bytes() == previous
    assert (root / NOTE).read_bytes() == note
    assert quarantined_now(root) == {DEAD_P1}


@pytest.mark.parametrize(
    ("options", "first_words"),
    [
        (
            ("--table", "acme_web.page_views"),
            "kbqe: error: acme_web.page_views has no quarantined file in ",
        ),
        (
            ("--table", "acme_sales.nothing_here"),
            "kbqe: error: acme_sales.nothing_here has no quarantined file in ",
        ),
        (
            ("--table", ORDERS, "--file", VIEWS_P0),
            f"kbqe: error: --file {VIEWS_P0}: not a quarantined file of {ORDERS}",
        ),
        (
            ("--table", ORDERS, "--file", ORDERS_3_P0, "--file", DEAD_P1),
            f"kbqe: error: --file {DEAD_P1}: not a quarantined file of {ORDERS}",
        ),
        (
            ("--table", ORDERS, "--file", "typo.avro", "--file", "other.avro"),
            f"kbqe: error: --file typo.avro (and 1 more): not a quarantined file of {ORDERS}",
        ),
        (("--table", "orders"), "kbqe: error: --table: 'orders' is not DATASET.TABLE"),
        (("--table", "a.b.c"), "kbqe: error: --table: 'a.b.c' is not DATASET.TABLE"),
    ],
    ids=[
        "table with only a pending job",
        "unknown table",
        "file not quarantined",
        "file of another table",
        "two unknown files",
        "no dataset",
        "two dots",
    ],
)
def test_refusals_are_one_line_and_write_nothing(
    run: Run, quarantined: Area, options: tuple[str, ...], first_words: str
) -> None:
    before = files_of(quarantined.root)
    result = run("load", "release", "--staging", str(quarantined.root), *options, "--yes")
    assert_one_error_line(result, first_words)
    assert files_of(quarantined.root) == before


def test_a_table_is_refused_once_all_its_files_are_released(run: Run, area: Area) -> None:
    args = ("load", "release", "--staging", str(area.root), "--table", ORDERS, "--yes")
    assert run(*args).code == 0
    result = run(*args)
    assert_one_error_line(
        result,
        f"kbqe: error: {ORDERS} has no quarantined file in {area.root}; nothing to "
        "release (no table has any)",
    )
