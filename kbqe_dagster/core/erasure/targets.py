"""Which tables an erasure reaches, by which columns, and which topics feed them.

A ``dataset.table`` key of ``erasure.tables`` is that table; for a keyed topic's table
``D.T`` also its changelog ``D.T_changelog`` (the history view ``D.T_history`` reads the
changelog, so erasing there erases it; a view is never a DELETE target). A ``dataset.*`` key
is every table the dataset holds in BigQuery (views and the emulator path's temporary tables
aside), an exact key winning over it. A table that does not exist yet holds nothing to erase.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kbqe_dagster.core.config.erasure import ErasureTable
from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.erasure.requests import ErasureRequest, ErasureRequestError
from kbqe_dagster.core.keyed.contract import changelog_table

DEAD_LETTER_KEY_COLUMN = "raw_key"
"""The Kafka key of a dead letter (core/record/dead_letter_record.py)."""
TEMPORARY_TABLE_PREFIX = "_kbqe_"
"""Tables kbqe makes for its own use (the emulator path's by-name loads): never targets."""


@dataclass(frozen=True)
class Target:
    """One table a subject's rows are erased from."""

    dataset: str
    table: str
    columns: tuple[str, ...]
    """Columns or nested field paths compared with the subject id."""
    key_column: str | None
    """The column holding the Kafka key, compared with the subject id's UTF-8 bytes."""
    family: str
    """The ``dataset.table`` a request's ``tables`` names to reach this one (a changelog's
    family is its keyed table)."""
    explicit: bool
    """Named by an exact key: a column it lacks is an error, not a reason to skip it."""
    dead_letter: bool = False
    partition_column: str | None = None
    """The column BigQuery partitions it on, where kbqe created it (a follow-up pass
    restricts its DELETE there); None: not known, never restricted."""
    hourly: bool = False
    require_partition_filter: bool = False
    """Its ``tables:`` entry requires a partition filter: a statement without a restriction
    filters on every partition of :attr:`partition_column`."""

    @property
    def name(self) -> str:
        return f"{self.dataset}.{self.table}"

    @property
    def required_filter_column(self) -> str | None:
        """The partition column every statement on it must filter on; None: no such rule."""
        return self.partition_column if self.require_partition_filter else None


def configured_targets(
    config: PipelineConfig, existing: Mapping[str, Sequence[str]]
) -> tuple[Target, ...]:
    """Every table ``erasure.tables`` reaches, given the tables each of its datasets holds
    now (``existing``: dataset → base table names; views left out by the caller)."""
    out: dict[str, Target] = {}
    exact = {key for key, _ in config.erasure.tables if not key.endswith(".*")}
    for key, settings in config.erasure.tables:
        dataset, table = key.split(".")
        present = set(existing.get(dataset, ()))
        if table != "*":
            names = [table]
            if (dataset, changelog_table(table)) in config.changelog_tables:
                names.append(changelog_table(table))
            for name in names:
                if name in present:
                    out[f"{dataset}.{name}"] = _target(config, dataset, name, settings, key, True)
            continue
        for name in sorted(present):
            if f"{dataset}.{name}" in exact or name.startswith(TEMPORARY_TABLE_PREFIX):
                continue
            family = f"{dataset}.{name}"
            out.setdefault(family, _target(config, dataset, name, settings, family, False))
    return tuple(out[name] for name in sorted(out))


def _target(
    config: PipelineConfig, dataset: str, table: str, settings: ErasureTable, family: str,
    explicit: bool,
) -> Target:  # fmt: skip
    dead = config.is_dead_letter_table(dataset, table)
    key_column = None
    if settings.kafka_key:
        key_column = DEAD_LETTER_KEY_COLUMN if dead else config.key_column_of(dataset, table)
    layout = config.table_layout(dataset, table)
    keyed_current = (dataset, changelog_table(table)) in config.changelog_tables
    return Target(
        dataset=dataset,
        table=table,
        columns=() if dead else settings.columns,  # a dead letter's value is raw bytes
        key_column=key_column,
        family=family,
        explicit=explicit,
        dead_letter=dead,
        # A keyed current table is written by its MERGE, not by loads of dated files; a
        # table partitioned on a column of the records (partition_column) holds a row in the
        # partition of its value, not of its event date: neither is restricted by dates.
        partition_column=None
        if keyed_current or layout.user_partition_column
        else layout.partition_column,
        hourly=layout.partitioning.value == "hour" and not dead,
        require_partition_filter=bool(layout.options.require_partition_filter)
        and not keyed_current,
    )


def request_targets(
    request: ErasureRequest, targets: Iterable[Target], config: PipelineConfig
) -> tuple[Target, ...]:
    """The targets ``request`` reaches: all of them, or those of the tables it names. A
    named table that ``erasure.tables`` does not cover refuses the request."""
    targets = tuple(targets)
    if not request.tables:
        return targets
    for name in request.tables:
        dataset, table = name.split(".")
        if config.erasure.table_settings(dataset, table) is None:
            raise ErasureRequestError(
                f"request {request.request_id} ({request.source}): {name} is not covered "
                "by erasure.tables"
            )
    wanted = set(request.tables)
    return tuple(t for t in targets if t.family in wanted or t.name in wanted)


def feeding_topics(config: PipelineConfig, targets: Iterable[Target]) -> tuple[str, ...]:
    """The topics whose messages may become rows of ``targets``: a topic with static
    destinations feeds those (and a keyed topic its changelog); a topic whose routing names
    tables per record may feed any table; every topic feeds the dead-letter table."""
    names = {t.name for t in targets}
    if any(t.dead_letter for t in targets):
        return config.topic_names
    out = []
    for topic in config.topics:
        statics = topic.static_destinations
        if not statics or topic.routing.static_destination is None:
            out.append(topic.name)
            continue
        tables = {f"{d.dataset}.{d.table}" for d in statics}
        if topic.keyed:
            tables |= {f"{d.dataset}.{changelog_table(d.table)}" for d in statics}
        if tables & names:
            out.append(topic.name)
    return tuple(out)
