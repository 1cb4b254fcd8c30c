"""With ``KBQE_ENV=local`` (the default) the read-only staging commands need no
``--staging``: they read the running local stack's staging bucket, as ``kbqe health`` does.
Read-only on the shared stack: nothing here writes to it."""

from __future__ import annotations

import pytest

from kbqe_dagster_tests.cli.conftest import Run

LOCAL_STAGING = "gs://kbqe-local/staging"

READ_ONLY_COMMANDS = [
    ("staging", "status"),
    ("load", "plan"),
    ("retention", "plan"),
    ("dead-letters", "--limit", "0"),
]


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=" ".join)
def test_the_command_reads_the_local_stacks_staging_area_without_options(
    run: Run, command: tuple[str, ...], local_stack
) -> None:
    report = run(*command, "--json").json()
    assert report["staging"] == LOCAL_STAGING


def test_the_text_report_names_the_local_staging_area(run: Run, local_stack) -> None:
    result = run("staging", "status")
    assert result.code == 0, result.err
    assert result.out.startswith(f"staging area {LOCAL_STAGING}")
