"""The soak (``reliability/soak.py``), bounded: the product as production runs it —
``dagster-daemon``, the code server and the webserver as processes of their own, runs launched
by the queued run coordinator under the project's dagster.yaml, runs, events, schedules and
pool slots in PostgreSQL, as production keeps them (SQLite with ``KBQE_SOAK_STORAGE=sqlite``) — fed by a
fleet of topics of every kind while every fault kind is injected once, then checked end to end.

It runs on a private local stack (its own home and ports: the faults stop services), never the
one the other tests share; ``KBQE_SOAK_MINUTES`` sets how long it produces (default 10, what
``make test`` runs; ``make soak`` is the 60-minute run); ``KBQE_SOAK_REPORT`` names a file to
write its JSON report to; ``KBQE_SOAK_STORAGE`` the Dagster instance's storage (default
``postgres``: a database of the run's own on the private stack's PostgreSQL; ``sqlite`` as
``make soak`` and every other test; docs/deployment.md, "Dagster on Postgres")
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reliability.soak import DEFAULT_HOME, PORTS, Soak, private_stack_env, render
from reliability.soak_faults import KINDS

MINUTES = float(os.environ.get("KBQE_SOAK_MINUTES", "10"))
SEED = 7
STORAGE = os.environ.get("KBQE_SOAK_STORAGE", "postgres")
SETTLE_MINUTES = 15

# The run takes MINUTES of producing, up to SETTLE_MINUTES of loading, then the drain: far
# past the suite's 600 s per test (the module fixture's time counts against the first test).
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout((MINUTES + SETTLE_MINUTES + 15) * 60),
]


@pytest.fixture(scope="module")
def soak_report():
    from kbqe_dagster_tests.conftest import REPO_ROOT

    saved = dict(os.environ)
    try:
        shared = os.environ.get("KBQE_LOCAL_HOME", str(REPO_ROOT / ".kbqe-local"))
        for name in PORTS:  # the shared stack's overrides are not the soak's ports
            os.environ.pop(f"KBQE_LOCAL_{name}_PORT", None)
        private_stack_env(DEFAULT_HOME, Path(shared) / "cache")
        report = Soak(
            MINUTES,
            SEED,
            DEFAULT_HOME,
            faults=True,
            settle_minutes=SETTLE_MINUTES,
            storage=STORAGE,
        ).run()
        if os.environ.get("KBQE_SOAK_REPORT"):
            Path(os.environ["KBQE_SOAK_REPORT"]).write_text(render(report) + "\n")
        yield report
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_dagster_instance_ran_on_the_storage_asked_for(soak_report) -> None:
    storage = soak_report["storage"]
    assert storage["kind"] == STORAGE
    if STORAGE == "postgres":
        assert storage["database"].startswith("dagster_soak_")
        assert storage["server"].endswith(f":{PORTS['POSTGRES']}")


def test_every_message_is_in_bigquery_exactly_once(soak_report) -> None:
    once = soak_report["exactly_once"]
    assert soak_report["messages_produced"] > 1_000
    assert (once["duplicates"], once["losses"], once["misplaced"], once["unexpected"]) == (
        0,
        0,
        0,
        0,
    ), once["samples"]
    assert once["avro_left_in_staging"] == 0, once["samples"]
    assert once["rows_loaded"] == once["good"] and once["dead_letters_loaded"] == once["bad"]
    assert soak_report["produce_failures"] == []


def test_keyed_tables_equal_their_oracle(soak_report) -> None:
    assert soak_report["keyed"]["changes_produced"] > 0
    assert soak_report["keyed"]["wrong"] == 0, soak_report["keyed"]["differences"]


def test_every_fault_kind_was_injected_and_recovered_from(soak_report) -> None:
    faults = soak_report["faults"]
    assert {k for k, n in faults["injected"].items() if n} == set(KINDS), faults["not_injected"]
    never = {k: v for k, v in faults["recovery_s"].items() if v["max"] is None}
    assert never == {}, faults["events"]


def test_no_run_is_stuck_and_no_pool_slot_is_held(soak_report) -> None:
    assert soak_report["runs_stuck"] == []
    assert all(not (p["claimed"] or p["pending"]) for p in soak_report["pools"].values())
    runs = soak_report["runs"]
    assert runs["stage_job"].get("SUCCESS", 0) > 0 and runs["load_job"].get("SUCCESS", 0) > 0


def test_checks_pass_and_ticks_fail_only_during_outages(soak_report) -> None:
    assert soak_report["asset_checks"]["evaluated"] > 0
    assert soak_report["asset_checks"]["failing"] == []
    assert soak_report["tick_failures_unexplained"] == []


def test_staging_holds_only_what_retention_keeps(soak_report) -> None:
    staging = soak_report["staging_at_end"]
    assert staging["problems"] == [], staging
    assert set(staging["kept"]) == {"newest"}, staging


def test_every_table_is_declared_complete_up_to_the_last_complete_day(soak_report) -> None:
    completeness = soak_report["completeness_at_end"]
    assert completeness["problems"] == [], completeness
    assert len(completeness["tables"]) >= 5


def test_no_long_lived_process_grows(soak_report) -> None:
    memory = soak_report["memory"]
    assert memory["leaks"] == [], memory["processes"]
    assert {k.split("#")[0] for k in memory["processes"]} == {"daemon", "code_server", "webserver"}


def test_freshness_is_measured_for_every_table(soak_report) -> None:
    freshness = soak_report["freshness"]
    tables = [k for k in freshness if "." in k]
    assert len(tables) >= 5, freshness
    assert all(freshness[t]["p99_s"] >= freshness[t]["p50_s"] > 0 for t in tables)


def test_the_soak_passes(soak_report) -> None:
    assert soak_report["passed"], soak_report["failures"]
