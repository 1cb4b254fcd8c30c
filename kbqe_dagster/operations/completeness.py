"""Completeness of the tables' DAY (or HOUR) partitions, read from the systems: the staging
listing and its done files (what is committed, what is loaded, how far each range got), the Kafka
watermarks of every feeding partition (one batched read), and the kept state
``_kbqe/completeness.json``. The decision itself is ``core/completeness/decision.py``.

**Loaded** means: a committed range whose avro files of the table are gone from the staging
area. The load step deletes a file only after its load job succeeded, so a committed range
without its file was loaded (a quarantined file stays, and holds the table back).

**The kept state** remembers, per table, the newest day declared complete (a floor: a
declared day stays declared), the late records counted since, and each feeding partition's
last known loaded offset, times, and when it was last seen caught up. It is needed because
retention deletes the done files of loaded ranges, and with them the times their manifests
recorded. :func:`evaluate` with ``write=True`` updates it; ``completeness_sensor`` and
``kbqe run --until-idle`` do, through one function (``defs/completeness/declare.py``),
``kbqe completeness`` only reads it. It is written by one writer at a time in practice (a
sensor tick, or a ``kbqe run``); a lost update (both at once) loses only a count of late
records, a caught-up moment, or a declaration the next evaluation makes again as far as the
data support it — never a completeness claim that the data does not support.

**Which partitions feed a table**: every partition of the topics routed to it statically, and
of every topic whose files for it the staging area (or the kept state) has shown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from kbqe_dagster.core.completeness.decision import (
    CompletenessSettings,
    PartitionProgress,
    Period,
    RangeFacts,
    TableCompleteness,
    Unit,
    loaded_position,
    table_completeness,
    unit_of,
)
from kbqe_dagster.core.completeness.state import (
    CompletenessState,
    PartitionMark,
    TableMark,
    late_records,
    mark_of,
    merge_counts,
    newest_of,
    newly_loaded_days,
    parse_state,
    with_mark,
)
from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.config.sections import DeadLetterDestination
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.keyed.contract import changelog_table
from kbqe_dagster.core.protocol.commit import Manifest, is_marker, parse_manifest
from kbqe_dagster.core.protocol.naming import DoneFileName, ParsedListing, parse_listing, parse_name
from kbqe_dagster.core.protocol.offsets import CommittedRange, recover
from kbqe_dagster.core.record.partitioning import parse_hour_key
from kbqe_dagster.resources.kafka.cluster import PartitionWatermarks
from kbqe_dagster.resources.staging_store import StagingStore

log = logging.getLogger(__name__)

STATE_NAME = "_kbqe/completeness.json"
READ_THREADS = 16
MAX_NEW_DAYS = 31
"""At most this many newly complete days are announced at once (a first evaluation announces
only the newest)."""
MAX_NEW_HOURS = 48
"""The same for the hours of an HOUR table."""

TopicPartition = tuple[str, int]
WatermarkReader = Callable[[Iterable[str]], Mapping[TopicPartition, PartitionWatermarks]]


@dataclass(frozen=True)
class TableReport:
    verdict: TableCompleteness
    late_after_complete: Mapping[str, int]
    newly_complete: tuple[Period, ...]
    """Partitions (days, or hours of an HOUR table) complete now that the kept state had not
    declared yet (announced by Dagster)."""
    topics: tuple[str, ...]

    @property
    def unit(self) -> Unit:
        return self.verdict.unit

    def to_json(self) -> dict[str, Any]:
        """An HOUR table's keys are hours (``2026-11-23T14``): ``next_hour`` and
        ``late_after_complete_by_hour`` stand for the DAY tables' ``next_day`` and
        ``late_after_complete_by_day``."""
        v = self.verdict
        unit = v.unit.name
        return {
            "partitioning": str(v.unit.partitioning),
            "basis": v.basis,
            "newest_complete": v.key(v.newest_complete),
            f"next_{unit}": v.key(v.next_day),
            "held_back_by": [h.as_dict() for h in v.held_back_by],
            "late_after_complete": sum(self.late_after_complete.values()),
            f"late_after_complete_by_{unit}": dict(self.late_after_complete),
            "topics": list(self.topics),
            "partitions": v.partitions,
        }


@dataclass(frozen=True)
class CompletenessReport:
    observed_at: datetime
    tables: Mapping[str, TableReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "observed_at": self.observed_at.isoformat(),
            "tables": {name: t.to_json() for name, t in sorted(self.tables.items())},
        }


def read_state(store: StagingStore) -> CompletenessState:
    if not any(f.name == STATE_NAME for f in store.list("_kbqe/")):
        return CompletenessState()
    try:
        content = store.read_bytes(STATE_NAME)
    except StagingError:  # deleted between the listing and the read
        return CompletenessState()
    return parse_state(content, store.uri(STATE_NAME))


def evaluate(
    config: PipelineConfig,
    store: StagingStore,
    read_watermarks: WatermarkReader,
    now: datetime,
    *,
    table: str | None = None,
    write: bool = False,
) -> CompletenessReport:
    """Completeness of every table (or ``table``, ``dataset.table``) as of ``now``; with
    ``write``, the kept state is updated (newly declared days, late counts, marks)."""
    state = read_state(store)
    listing = parse_listing(f.name for f in store.list(""))
    feeding = _feeding(config, listing, state)
    if table is not None:
        feeding = {table: feeding.get(table, set())}
    # The listing is read before the watermarks and ``now`` is taken before both: a position
    # can only look older than it is, and a high watermark newer, never the other way round.
    marks = read_watermarks(sorted({t for topics in feeding.values() for t in topics}))
    observed_at = now
    facts = _FactsReader(store, config.dead_letter)
    chains = recover(listing.done)
    avro_ranges = _avro_ranges(listing)
    settings = {t.name: t.completeness for t in config.topics}
    facts.prefetch(_ranges_to_read(feeding, marks, chains, avro_ranges, state))
    tables: dict[str, TableReport] = {}
    new_marks: dict[str, TableMark] = dict(state.tables)
    for name, topics in sorted(feeding.items()):
        unit = unit_of(config.partitioning(*name.split(".", 1)))
        kept = _kept(state.tables.get(name, TableMark()), unit)
        progress: list[PartitionProgress] = []
        new_days: list[Mapping[str, int]] = []
        partition_marks: dict[TopicPartition, PartitionMark] = {}
        for tp, wm in sorted(marks.items()):
            if tp[0] not in topics:
                continue
            chain = chains.get(tp)
            ranges = chain.chain if chain is not None else ()
            mark = kept.partitions.get(tp)
            rows = []
            for rng in ranges:  # up to the first range not loaded: the rest cannot count yet
                rows.append(_facts_of(rng, name, avro_ranges, facts, mark))
                if rows[-1].has_files:
                    break
            position = with_mark(loaded_position(rows, start=wm.low), mark)
            new_days.append(newly_loaded_days(position, mark, unit))
            caught_up = position.offset >= wm.high
            partition_marks[tp] = mark_of(position, observed_at if caught_up else None)
            progress.append(
                PartitionProgress(
                    tp[0],
                    tp[1],
                    position.offset,
                    wm.high,
                    observed_at,
                    position.kafka_time,
                    position.event_time,
                    settings.get(tp[0], CompletenessSettings()),
                    staged_offset=chain.resume_offset if chain is not None else wm.low,
                    caught_up_at=position.caught_up_at,
                )
            )
        verdict = table_completeness(name, progress, unit, declared=kept.newest_complete)
        late = merge_counts(
            kept.late_after_complete,
            late_records(merge_counts(*new_days), kept.newest_complete, unit),
        )
        newly = _newly_complete(kept.newest_complete, verdict.newest_complete, unit)
        tables[name] = TableReport(verdict, late, newly, tuple(sorted(topics)))
        new_marks[name] = TableMark(
            newest_of(kept.newest_complete, verdict.newest_complete),
            late,
            {**kept.partitions, **partition_marks},
        )
    if write:
        _write(store, state, CompletenessState(new_marks))
    return CompletenessReport(observed_at, tables)


def _ranges_to_read(
    feeding: Mapping[str, set[str]],
    marks: Mapping[TopicPartition, Any],
    chains: Mapping[TopicPartition, Any],
    avro_ranges: set[tuple[str, int, int, str]],
    state: CompletenessState,
) -> list[CommittedRange]:
    """The committed ranges whose manifests the evaluation reads: each table's loaded prefix
    past its kept mark (older ranges are summed up in the mark)."""
    wanted: dict[tuple[str, int, int], CommittedRange] = {}
    for name, topics in feeding.items():
        kept = state.tables.get(name, TableMark())
        for tp in marks:
            chain = chains.get(tp)
            if tp[0] not in topics or chain is None:
                continue
            mark = kept.partitions.get(tp)
            for rng in chain.chain:
                if (rng.topic, rng.partition, rng.first, name) in avro_ranges:
                    break
                if mark is None or rng.last >= mark.loaded_offset:
                    wanted[(rng.topic, rng.partition, rng.first)] = rng
    return list(wanted.values())


def _kept(mark: TableMark, unit: Unit) -> TableMark:
    """The kept mark, without the declarations of another unit (a table switched between DAY
    and HOUR, MONTH or YEAR): its partitions' progress still counts, its declared periods do
    not."""
    newest = mark.newest_complete
    if newest is None or unit.is_start(newest):
        return mark
    return TableMark(None, {}, mark.partitions)


def _newly_complete(before: Period | None, now: Period | None, unit: Unit) -> tuple[Period, ...]:
    """The periods after ``before`` up to ``now``, at most the newest few (a table idle for
    long declares its recent periods, not all of them); only ``now`` when none was before."""
    if now is None or (before is not None and now <= before):
        return ()
    if before is None:
        return (now,)
    most = MAX_NEW_HOURS if unit.hourly else MAX_NEW_DAYS
    periods: list[Period] = []
    period = now
    while len(periods) < most and period > before:
        periods.append(period)
        period = unit.previous(period)
    return tuple(reversed(periods))


def _write(store: StagingStore, before: CompletenessState, after: CompletenessState) -> None:
    content = after.encode()
    if content != before.encode():
        store.put_bytes(STATE_NAME, content)


def _feeding(
    config: PipelineConfig, listing: ParsedListing, state: CompletenessState
) -> dict[str, set[str]]:
    feeding: dict[str, set[str]] = {}
    for topic in config.topics:
        for static in topic.static_destinations:
            table = changelog_table(static.table) if topic.keyed else static.table
            feeding.setdefault(f"{static.dataset}.{table}", set()).add(topic.name)
    for name in list(listing.avro) + list(listing.done):
        key = name.key
        if is_marker(key) or config.is_dead_letter_table(key.dataset, key.table):
            continue
        feeding.setdefault(f"{key.dataset}.{key.table}", set()).add(key.topic)
    for table, mark in state.tables.items():
        feeding.setdefault(table, set()).update(t for t, _ in mark.partitions)
    return feeding


def _avro_ranges(listing: ParsedListing) -> set[tuple[str, int, int, str]]:
    """(topic, partition, first offset, dataset.table) of every avro file still staged."""
    return {
        (a.key.topic, a.key.partition, a.key.first_offset, f"{a.key.dataset}.{a.key.table}")
        for a in listing.avro
    }


def _facts_of(
    rng: CommittedRange,
    table: str,
    avro_ranges: set[tuple[str, int, int, str]],
    reader: _FactsReader,
    mark: PartitionMark | None,
) -> RangeFacts:
    has_files = (rng.topic, rng.partition, rng.first, table) in avro_ranges
    if has_files or (mark is not None and rng.last < mark.loaded_offset):
        # Pending ranges hold the position whatever they say; ranges the kept mark already
        # covers are not read again.
        return RangeFacts(rng.first, rng.last, has_files)
    manifest = reader.manifest(rng)
    if manifest is None:
        return RangeFacts(rng.first, rng.last, has_files)
    days: dict[str, int] = {}
    hours: dict[str, int] = {}
    event_days: list[str] = []
    event_hours: list[str] = []
    for f in manifest.files:
        parsed = parse_name(f.avro)
        if parsed is None:
            continue
        if reader.dead_letter.is_table(parsed.key.dataset, parsed.key.table):
            continue
        file_table = f"{parsed.key.dataset}.{parsed.key.table}"
        event_days.extend(d for d, n in f.days if n)
        event_hours.extend(h for h, n in f.hours if n)
        if file_table == table:
            for d, n in f.days:
                days[d] = days.get(d, 0) + n
            for h, n in f.hours:
                hours[h] = hours.get(h, 0) + n
    return RangeFacts(
        rng.first,
        rng.last,
        has_files,
        manifest.kafka_ts_max,
        date.fromisoformat(max(event_days)) if event_days else None,
        days,
        parse_hour_key(max(event_hours)) if event_hours else None,
        hours,
    )


class _FactsReader:
    """One manifest read per committed range, shared by every table it feeds; a first
    evaluation of a large staging area reads them in a small thread pool (they are GETs)."""

    def __init__(self, store: StagingStore, dead_letter: DeadLetterDestination) -> None:
        self.store = store
        self.dead_letter = dead_letter
        self._cache: dict[tuple[str, int, int], Manifest | None] = {}

    def prefetch(self, ranges: list[CommittedRange]) -> None:
        if not ranges:
            return
        self.manifest(ranges[0])  # builds the store's client before the threads
        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(ranges))) as pool:
            read = list(pool.map(lambda r: self._read(r.done[0]), ranges[1:]))
        for rng, manifest in zip(ranges[1:], read):
            self._cache[(rng.topic, rng.partition, rng.first)] = manifest

    def manifest(self, rng: CommittedRange) -> Manifest | None:
        key = (rng.topic, rng.partition, rng.first)
        if key not in self._cache:
            self._cache[key] = self._read(rng.done[0])
        return self._cache[key]

    def _read(self, done: DoneFileName) -> Manifest | None:
        try:
            return parse_manifest(self.store.read_bytes(done.name), done.name)
        except StagingError as error:  # deleted by retention since the listing, or damaged
            log.warning("completeness: no facts from done file %s: %s", done.name, error)
            return None
