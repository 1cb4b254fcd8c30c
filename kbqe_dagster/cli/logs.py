"""The console's logging, set up once per process by ``kbqe`` and by the scripts
(``bench/bench_stage.py``, ``reliability/fault_suite.py``): :func:`setup_logging`.

Without ``-v`` the console shows our own progress (``kbqe*`` loggers at INFO) and every
library's warnings and errors, and nothing of the libraries' chatter: httpx's
``HTTP Request:`` lines, alembic's ``setup plugin …``/``Context impl SQLiteImpl`` lines when
Dagster opens its SQLite storage, py4j's connection lines. librdkafka's warnings are
transient by nature (a broker not up yet, a connection retried), so a Kafka client logging
to :data:`KAFKA_CLIENT_LOGGER` shows only its errors. With ``-v`` everything passes, with
times and logger names, except py4j's commands (:data:`NEVER_BELOW`).

The filter sits on the console handler, not on the loggers: the loggers keep their levels,
so the Dagster event log and tests that capture logs see what they always saw.

Dagster's own per-event console lines (``dagster - DEBUG - …``) come from the run's
``console`` logger, not from Python's logger tree; a run launched from here sets its level
with :func:`dagster_console_config`.
"""

from __future__ import annotations

import logging
import sys

OURS = ("kbqe", "kbqe_dagster", "reliability", "bench")
"""Loggers whose INFO lines are the progress a user wants to see."""

KAFKA_CLIENT_LOGGER = "kbqe_dagster.kafka"
"""The logger librdkafka's lines go to (confluent-kafka's ``logger`` client setting)."""

# Below these levels a logger's records stay off the console (without -v): transient by
# nature, they say nothing a user can act on.
QUIET_BELOW = {
    KAFKA_CLIENT_LOGGER: logging.ERROR,
    # The load coordinator's delete threads overflow urllib3's pool of 10: noise, not a fault.
    "urllib3.connectionpool": logging.ERROR,
    # Schema notices as JSON documents (loading/coordinator.py): for log shippers and -v; the
    # console already has each notice's one-line text.
    "kbqe_dagster.notices": logging.WARNING,
}

# Below these levels a logger's records never reach the console, not even with -v. py4j's
# DEBUG lines are every command sent to the Spark JVM, the pickled stage tasks among them, and
# a task carries its Kafka settings to the executors: a key password, a SASL password or an
# OAUTHBEARER client secret would be printed in base64 (seen with `kbqe -v run` over mTLS).
NEVER_BELOW = {"py4j": logging.INFO}

VERBOSE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_FORMAT = "%(message)s"


def _within(name: str, parent: str) -> bool:
    return name == parent or name.startswith(parent + ".")


def _never_shown(record: logging.LogRecord) -> bool:
    return any(
        _within(record.name, name) and record.levelno < level for name, level in NEVER_BELOW.items()
    )


class VerboseFilter(logging.Filter):
    """Which records reach the console with ``-v``: all but the :data:`NEVER_BELOW` ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _never_shown(record)


class ConsoleFilter(logging.Filter):
    """Which records reach the console without ``-v``: ours from ``ours_from`` (INFO), a
    library's from WARNING, the :data:`QUIET_BELOW` ones from their level."""

    def __init__(self, ours_from: int = logging.INFO) -> None:
        super().__init__()
        self.ours_from = ours_from

    def filter(self, record: logging.LogRecord) -> bool:
        for name, level in QUIET_BELOW.items():
            if _within(record.name, name):
                return record.levelno >= level
        if any(_within(record.name, ours) for ours in OURS):
            return record.levelno >= self.ours_from
        return record.levelno >= logging.WARNING


def setup_logging(
    verbose: bool = False, fmt: str | None = None, ours_from: int = logging.INFO
) -> None:
    """Log to stderr: everything at DEBUG with ``verbose`` but what :class:`VerboseFilter`
    holds back, else what :class:`ConsoleFilter` lets through (a script that prints its own
    progress passes ``ours_from=WARNING``). A second call replaces the first's handler. Like
    ``logging.basicConfig``, it leaves alone a root logger that someone else configured (an
    embedding program, pytest's log capture)."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_kbqe_console", False)]
    if root.handlers and not ours:
        return
    for old in ours:
        root.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler._kbqe_console = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(fmt or (VERBOSE_FORMAT if verbose else QUIET_FORMAT)))
    handler.addFilter(VerboseFilter() if verbose else ConsoleFilter(ours_from))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def dagster_console_config(verbose: bool = False) -> dict:
    """The ``loggers`` run config of an in-process Dagster run: its console logger prints
    every event at DEBUG; without ``-v`` only warnings and errors (a failed step) show."""
    level = "DEBUG" if verbose else "WARNING"
    return {"loggers": {"console": {"config": {"log_level": level}}}}
