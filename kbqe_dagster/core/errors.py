"""The one error hierarchy of kbqe_dagster.

Every subsystem raises a subclass of :class:`KbqeError` whose message names what an operator
needs to act: the topic, partition and offset, the file, or the configuration key.
"""

from __future__ import annotations


class KbqeError(Exception):
    """Base class of every error raised on purpose by kbqe_dagster."""


# --- configuration -------------------------------------------------------------------------
class ConfigError(KbqeError):
    """The pipeline configuration is invalid; the message names the offending key path."""


# --- messages (DESIGN.md §2) ---------------------------------------------------------------
class BadInputError(KbqeError):
    """A Kafka message that cannot be staged. ``reason`` is a stable, machine-readable kind
    (the dead-letter table's ``reason`` column); the message names topic/partition/offset
    when they are known."""

    reason: str = "bad_input"


class WireFormatError(BadInputError):
    """The value is not a Confluent-framed Avro message."""


# --- staging (DESIGN.md §3) ----------------------------------------------------------------
class StagingError(KbqeError):
    """The staging area is in a state the stage or load step cannot proceed from."""


class CommitConflictError(StagingError):
    """A create-only done file already exists: another writer committed this range first."""


# --- loading (DESIGN.md §4) ----------------------------------------------------------------
class LoadError(KbqeError):
    """A BigQuery load job could not be planned, submitted or followed."""


class StateFileError(LoadError):
    """The load state file is missing, unreadable or corrupt."""


# --- local stack -----------------------------------------------------------------------------
class StackError(KbqeError):
    """The local development stack could not be installed, started or reached; the message
    says what is wrong and how to fix it."""
