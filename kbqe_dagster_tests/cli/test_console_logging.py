"""What reaches the console: without ``-v`` our progress and every warning or error, none of
the libraries' chatter (Dagster's per-event lines, httpx, alembic, librdkafka's transient
warnings); with ``-v`` all of it but py4j's commands, which carry the pickled stage tasks and
their Kafka settings (secrets included). One setup for ``kbqe`` and the scripts."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from kbqe_dagster.cli.logs import (
    KAFKA_CLIENT_LOGGER,
    ConsoleFilter,
    VerboseFilter,
    dagster_console_config,
)

REPO = Path(__file__).resolve().parents[2]


def _record(name: str, level: int) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "message", None, None)


@pytest.mark.parametrize(
    ("logger", "level", "shown"),
    [
        ("kbqe", logging.INFO, True),
        ("kbqe_dagster.localstack.stack", logging.INFO, True),
        ("kbqe_dagster.loading.coordinator", logging.DEBUG, False),
        ("httpx", logging.INFO, False),
        ("httpx", logging.WARNING, True),
        ("alembic.runtime.plugins", logging.INFO, False),
        ("alembic.runtime.migration", logging.INFO, False),
        ("py4j.clientserver", logging.INFO, False),
        ("google.cloud.bigquery", logging.ERROR, True),
        (KAFKA_CLIENT_LOGGER, logging.WARNING, False),
        (KAFKA_CLIENT_LOGGER, logging.ERROR, True),
        ("urllib3.connectionpool", logging.WARNING, False),
        ("kbqe_dagster.loading.coordinator", logging.INFO, True),  # a notice's one-line text
        ("kbqe_dagster.notices", logging.INFO, False),  # its JSON document: log shippers, -v
        ("kbqe_dagsterx", logging.INFO, False),  # a prefix is not a parent
    ],
)
def test_the_console_filter(logger: str, level: int, shown: bool) -> None:
    assert ConsoleFilter().filter(_record(logger, level)) is shown


@pytest.mark.parametrize(
    ("logger", "level", "shown"),
    [
        ("py4j.clientserver", logging.DEBUG, False),  # "Command to send: ..." a pickled task
        ("py4j.java_gateway", logging.DEBUG, False),
        ("py4j.clientserver", logging.INFO, True),
        ("py4jx", logging.DEBUG, True),  # a prefix is not a parent
        ("httpx", logging.DEBUG, True),
        ("kbqe_dagster.staging.job", logging.DEBUG, True),
    ],
)
def test_the_verbose_filter_holds_back_only_py4js_commands(
    logger: str, level: int, shown: bool
) -> None:
    assert VerboseFilter().filter(_record(logger, level)) is shown


def test_a_script_that_prints_its_own_progress_keeps_our_info_off() -> None:
    quiet = ConsoleFilter(ours_from=logging.WARNING)
    assert not quiet.filter(_record("kbqe_dagster.staging.job", logging.INFO))
    assert quiet.filter(_record("kbqe_dagster.staging.job", logging.WARNING))


def test_dagster_runs_print_only_warnings_without_verbose() -> None:
    assert dagster_console_config(False) == {
        "loggers": {"console": {"config": {"log_level": "WARNING"}}}
    }
    assert dagster_console_config(True)["loggers"]["console"]["config"]["log_level"] == "DEBUG"


SCRIPT = """
import logging, sys
import dagster as dg
from kbqe_dagster.cli.logs import setup_logging, dagster_console_config

verbose = sys.argv[1] == "-v"
setup_logging(verbose)
logging.getLogger("httpx").info("HTTP Request: POST http://registry/subjects")
logging.getLogger("alembic.runtime.plugins").info("setup plugin alembic.autogenerate.schemas")
logging.getLogger("kbqe_dagster.kafka").warning("%4|FAIL|rdkafka#producer-1| Connection refused")
logging.getLogger("kbqe_dagster.demo").info("ours: 3 tables loaded")
logging.getLogger("google.cloud").error("a library error")
logging.getLogger("py4j.clientserver").debug("Command to send: a pickled stage task")

@dg.op
def step(context):
    context.log.info("an op line")

@dg.job
def tiny():
    step()

assert tiny.execute_in_process(run_config=dagster_console_config(verbose)).success
"""


def _console(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_without_verbose_only_our_lines_and_real_errors_reach_the_console() -> None:
    lines = [line for line in _console("-").splitlines() if line.strip()]
    assert lines == ["ours: 3 tables loaded", "a library error"]


def test_verbose_shows_every_library_and_every_dagster_event() -> None:
    out = _console("-v")
    for expected in (
        "HTTP Request:",
        "setup plugin",
        "%4|FAIL|",
        "ours: 3 tables loaded",
        "a library error",
        "dagster - DEBUG - tiny",
        "an op line",
    ):
        assert expected in out, expected
    assert "Command to send" not in out


@pytest.mark.parametrize("script", ["bench/bench_stage.py", "reliability/fault_suite.py"])
def test_the_scripts_set_up_the_console_with_the_one_function(script: str) -> None:
    tree = ast.parse((REPO / script).read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    calls = [
        n.func.id
        for n in ast.walk(main)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    assert "setup_logging" in calls
    assert not [
        n for n in ast.walk(main) if isinstance(n, ast.Attribute) and n.attr == "basicConfig"
    ]
    imports = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert "kbqe_dagster.cli.logs" in imports


@pytest.mark.parametrize("script", ["bench/bench_stage.py", "reliability/fault_suite.py"])
def test_the_scripts_accept_verbose(script: str) -> None:
    done = subprocess.run(
        [sys.executable, script, "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--verbose" in done.stdout
