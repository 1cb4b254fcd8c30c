"""``kbqe demo`` checks what an earlier run left behind before it does any work, and says
what is wrong and the command that fixes it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.errors import KbqeError, StateFileError
from kbqe_dagster.core.load.state import LoadState, QuarantinedFile
from kbqe_dagster.demo import preflight
from kbqe_dagster.demo.preflight import (
    START_OVER,
    DemoPreflightError,
    ServiceFact,
    check_stack,
    check_staging,
    stack_problems,
    staging_problems,
)

AT = datetime(2026, 11, 24, tzinfo=UTC)


def quarantined(table: str, name: str, error: str = "Binder Error: 14 columns but 13 values"):
    dataset, table = table.split(".")
    return QuarantinedFile(name, dataset, table, f"job-{name}", error, AT)


# --- the stack -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "services",
    [
        [ServiceFact("kafka", 11, True), ServiceFact("gcs", 12, True)],
        [ServiceFact("kafka", None, False), ServiceFact("gcs", None, False)],  # demo starts them
        [ServiceFact("kafka", 11, True), ServiceFact("gcs", None, False)],
    ],
    ids=["all up", "all down", "some down"],
)
def test_services_that_run_or_are_stopped_are_no_problem(services) -> None:
    assert stack_problems(services) == []


def test_a_service_started_but_not_answering_is_named_with_its_fix() -> None:
    [problem] = stack_problems([ServiceFact("kafka", 11, True), ServiceFact("gcs", 4242, False)])
    assert problem.what == "gcs was started (pid 4242) but does not answer"
    assert problem.fix.startswith("kbqe stack down && kbqe stack up ")
    assert START_OVER in problem.fix
    assert ".kbqe-local/run/gcs/gcs.log" in problem.fix


def test_a_slow_service_gets_a_grace_period_before_it_is_a_problem() -> None:
    answers = iter([False, False, True])
    facts = lambda: [ServiceFact("bigquery", 7, next(answers))]  # noqa: E731
    assert check_stack(facts, grace_seconds=5, poll_seconds=0) == []


def test_a_hung_service_is_a_problem_once_the_grace_period_is_over() -> None:
    calls = []

    def facts():
        calls.append(1)
        return [ServiceFact("bigquery", 7, False)]

    [problem] = check_stack(facts, grace_seconds=0.05, poll_seconds=0.01)
    assert problem.what.startswith("bigquery was started (pid 7)")
    assert len(calls) >= 2


# --- the staging area ----------------------------------------------------------------------
def test_an_empty_or_clean_load_state_is_no_problem() -> None:
    assert staging_problems(LoadState(), None) == []


def test_quarantined_files_are_named_per_table_with_the_release_command() -> None:
    state = LoadState(
        quarantined=(
            quarantined("acme_sales.orders", "a.avro"),
            quarantined("acme_sales.orders", "b.avro"),
            quarantined("acme_web.page_views", "c.avro", "first line\nsecond line"),
        )
    )
    problems = staging_problems(state, None)
    assert [p.what for p in problems] == [
        "2 file(s) of acme_sales.orders are quarantined by an earlier run "
        "(last error: Binder Error: 14 columns but 13 values)",
        "1 file(s) of acme_web.page_views are quarantined by an earlier run "
        "(last error: first line)",
    ]
    assert problems[0].fix.startswith("kbqe load release --table acme_sales.orders --yes")
    assert START_OVER in problems[0].fix


def test_an_unreadable_state_file_says_start_over() -> None:
    [problem] = staging_problems(None, "load state _kbqe/load_state.json is not valid JSON\n...")
    assert problem.what == (
        "the load state file of the local staging area is unreadable: "
        "load state _kbqe/load_state.json is not valid JSON"
    )
    assert problem.fix.startswith(START_OVER)


def test_reading_the_state_turns_a_state_file_error_into_a_problem() -> None:
    def unreadable() -> LoadState:
        raise StateFileError("load state _kbqe/load_state.json is not valid JSON")

    [problem] = check_staging(unreadable)
    assert "is not valid JSON" in problem.what


def test_the_error_counts_the_problems_printed_above_it() -> None:
    problems = stack_problems([ServiceFact("gcs", 1, False), ServiceFact("kafka", 2, False)])
    err = DemoPreflightError(problems)
    assert str(err) == (
        "the local stack is not ready for the demo: 2 problem(s), each with its fix above"
    )
    assert err.problems == tuple(problems)


# --- the wiring: the demo stops before any work --------------------------------------------
@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The demo's work replaced by a record of what it tried to do."""
    from kbqe_dagster.demo import run
    from kbqe_dagster.localstack import stack

    done: list[str] = []
    monkeypatch.setenv("KBQE_ENV", "local")  # run_demo sets it when missing; undone after
    monkeypatch.setattr(stack, "up", lambda *a, **k: done.append("stack up"))
    monkeypatch.setattr(run, "produce_demo_events", lambda n: done.append("produce") or {})
    monkeypatch.setattr(preflight, "NOT_ANSWERING_GRACE_SECONDS", 0)
    return done


def _status(name: str, running: bool, pid: int | None):
    from kbqe_dagster.localstack.base import ServiceStatus

    return ServiceStatus(name, running, pid, "endpoint")


def test_the_demo_stops_on_a_hung_service_before_starting_anything(
    no_work: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kbqe_dagster.demo import run
    from kbqe_dagster.localstack import stack

    monkeypatch.setattr(stack, "status", lambda *a, **k: [_status("gcs", False, 4242)])
    with pytest.raises(DemoPreflightError):
        run.run_demo(10)
    assert no_work == []
    assert "kbqe demo: gcs was started (pid 4242) but does not answer" in capsys.readouterr().err


def test_the_demo_stops_on_a_quarantine_before_producing(
    no_work: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kbqe_dagster.demo import run
    from kbqe_dagster.localstack import stack

    monkeypatch.setattr(stack, "status", lambda *a, **k: [_status("gcs", True, 1)])
    state = LoadState(quarantined=(quarantined("acme_sales.orders", "a.avro"),))
    monkeypatch.setattr(run, "_local_load_state", lambda: state)
    with pytest.raises(DemoPreflightError):
        run.run_demo(10)
    assert no_work == ["stack up"]
    err = capsys.readouterr().err
    assert "1 file(s) of acme_sales.orders are quarantined" in err
    assert "fix: kbqe load release --table acme_sales.orders --yes" in err


# --- after the load: a quarantine is not a success -----------------------------------------
class _Job:
    def execute_in_process(self, **_):
        return type(
            "Result", (), {"success": True, "get_asset_materialization_events": lambda _self: []}
        )()


class _Defs:
    """The few parts of the Definitions the demo's load step uses, over a real staging
    directory."""

    def __init__(self, store) -> None:
        dead_letter = type("DeadLetter", (), {"dataset": "dl", "table": "dead_letters"})()
        allowed = type("AllowList", (), {"patterns": ("acme_sales.*",)})()
        pipeline = type(
            "Pipeline", (), {"dead_letter": dead_letter, "allowed_destinations": allowed}
        )()
        self.resources = {
            "staging": type("Staging", (), {"store": lambda _self: store})(),
            "pipeline": type("PipelineResource", (), {"load": lambda _self: pipeline})(),
            "bigquery": type("BigQuery", (), {"client": lambda _self: None})(),
        }

    def resolve_job_def(self, name: str) -> _Job:
        return _Job()


def test_the_demo_ends_in_an_error_naming_the_quarantine_a_load_left(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kbqe_dagster.demo import load
    from kbqe_dagster.loading.state_file import StateFile
    from kbqe_dagster.resources.staging_store import StagingLocation

    store = StagingLocation(str(tmp_path)).open()
    StateFile(store).save(LoadState(quarantined=(quarantined("acme_sales.orders", "a.avro"),)))
    monkeypatch.setattr(
        load,
        "print_table_rows",
        lambda client, dead_letter, datasets: print("rows", sorted(datasets)),
    )
    with pytest.raises(KbqeError, match=r"quarantined files of 1 table\(s\)"):
        load.load_and_report(_Defs(store), instance=None)
    out, err = capsys.readouterr()
    assert out == "rows ['acme_sales', 'dl']\n"  # the pipeline's datasets only
    assert "kbqe demo: 1 file(s) of acme_sales.orders are quarantined" in err


def test_the_demo_load_without_a_quarantine_just_prints_the_rows(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kbqe_dagster.demo import load
    from kbqe_dagster.resources.staging_store import StagingLocation

    store = StagingLocation(str(tmp_path)).open()
    monkeypatch.setattr(
        load,
        "print_table_rows",
        lambda client, dead_letter, datasets: print("rows", sorted(datasets)),
    )
    loaded = load.load_and_report(_Defs(store), instance=None)
    assert capsys.readouterr() == ("rows ['acme_sales', 'dl']\n", "")
    assert loaded.bytes_loaded == 0, "no job finished: nothing loaded"
