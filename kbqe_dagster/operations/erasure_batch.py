"""Apply one erasure batch: the new requests (from ``kbqe erase`` or the requests topic) and
every pending one, one DELETE per table, audited; for the ``erasure`` job, ``kbqe erase``
and ``kbqe run --until-idle``.

A batch, in order (docs/operations.md, "Erasure"):

1. read the state (``_kbqe/erasure_state.json``: pending requests, the requests topic's read
   position) and the staging area's listing: the loaded position of every partition;
2. new requests: read from the requests topic past the recorded position, or given; each
   records its watches (core/erasure/pending.py) from its feeding topics' watermarks now;
3. per table: the subjects of the requests reaching it, the partitions to look at (whole
   table when one of them is on its first pass), counts per subject, then one DELETE;
4. the requests whose watches are all loaded are complete; one audit row per request;
5. the state is written last: a batch that dies before re-reads the same requests and
   applies them again, which deletes nothing more (a second pass finds nothing).

Runs in the load pool (defs/erasure/jobs.py): no load, merge or other erasure runs while a
batch reads the loaded positions and deletes, so a load can never land rows between the
read and the DELETE unnoticed. ``dry_run`` counts only: no DELETE, no audit, no state.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.erasure.pending import (
    ErasureState,
    PendingRequest,
    decode_state,
    describe_watches,
    follow_up_restriction,
    loaded_positions,
    merge_restrictions,
    nothing_to_look_at,
    state_after_pass,
    watches_at_arrival,
    window_done_files,
)
from kbqe_dagster.core.erasure.requests import (
    ErasureRequest,
    ErasureRequestError,
    parse_request_message,
    subject_hash,
)
from kbqe_dagster.core.erasure.statements import (
    ErasureStatementError,
    MatchColumn,
    column_type,
    count_statements,
    delete_statement,
    subject_text,
)
from kbqe_dagster.core.erasure.targets import (
    Target,
    configured_targets,
    feeding_topics,
    request_targets,
)
from kbqe_dagster.core.errors import KbqeError, StagingError
from kbqe_dagster.core.protocol.commit import Manifest, parse_manifest
from kbqe_dagster.operations.erasure_report import ErasureReport, RequestOutcome, TableErasure
from kbqe_dagster.resources.bigquery.erasure_tables import ErasureTables
from kbqe_dagster.resources.staging_store import StagingStore

log = logging.getLogger(__name__)

STATE_FILE = "_kbqe/erasure_state.json"

Watermarks = Callable[[Sequence[str]], Mapping[tuple[str, int], tuple[int, int]]]
"""topics → (topic, partition) → (low, high) watermark."""
RequestReader = Callable[[str, Mapping[int, int]], tuple[list[Any], dict[int, int]]]
"""(topic, next offset per partition) → (messages ``(key, value, partition, offset)``, the
next offsets after them)."""


class ErasureError(KbqeError):
    """An erasure batch that cannot run (no salt, an unreadable state, a table whose subject
    column is missing or of the wrong type)."""


def read_state(store: StagingStore) -> ErasureState:
    if STATE_FILE not in {f.name for f in store.list("_kbqe/")}:
        return ErasureState()
    return decode_state(store.read_bytes(STATE_FILE), store.uri(STATE_FILE))


def apply_erasures(
    config: PipelineConfig,
    store: StagingStore,
    tables: ErasureTables,
    watermarks: Watermarks,
    *,
    salt: str,
    now: datetime,
    requests: Sequence[ErasureRequest] = (),
    read_requests: RequestReader | None = None,
    dry_run: bool = False,
) -> ErasureReport:
    """One batch (module docstring)."""
    if not config.erasure.enabled:
        raise ErasureError(f"{config.source}: no erasure: section")
    if not salt:
        raise ErasureError(
            f"the salt variable {config.erasure.salt_env} is unset or empty: the audit table "
            "records the subject's salted hash, never the subject"
        )
    state = read_state(store)
    report = ErasureReport(dry_run)
    names = [f.name for f in store.list()]
    loaded = loaded_positions(names)
    datasets = sorted({key.split(".")[0] for key, _ in config.erasure.tables})
    targets = configured_targets(config, {d: tables.base_tables(d) for d in datasets})

    incoming = list(requests)
    read_to = dict(state.requests_read)
    topic = config.erasure.requests_topic
    if read_requests is not None and topic:
        messages, read_to = read_requests(topic, state.requests_read)
        for key, value, partition, offset in messages:
            try:
                incoming.append(parse_request_message(key, value, topic, partition, offset))
            except ErasureRequestError as error:
                log.warning("erasure request refused: %s", error)
                request_id = key.decode("utf-8", "replace") if key else f"{partition}/{offset}"
                report.requests.append(
                    RequestOutcome(
                        request_id,
                        None,
                        f"kafka:{topic}/{partition}/{offset}",
                        "refused",
                        note=str(error),
                    )  # fmt: skip
                )
    report.requests_read = read_to

    arrived = _arrivals(config, incoming, targets, loaded, watermarks, now, salt, report)
    batch = [*state.pending, *arrived]
    per_request, table_reports = _apply(config, batch, targets, tables, store, names, dry_run)
    report.tables = table_reports

    if dry_run:
        for p in arrived:
            report.requests.append(
                RequestOutcome(
                    p.request.request_id,
                    subject_hash(p.request.subject, salt),
                    p.request.source,
                    "dry_run",
                    per_request.get(p.request.request_id, 0),
                    [t.name for t in request_targets(p.request, targets, config)],
                    "counted only: nothing deleted",
                    describe_watches(p.watches),
                )
            )
        return report

    staged = replace(state, pending=tuple(batch), requests_read=read_to)
    after, complete = state_after_pass(staged, per_request, loaded)
    done_ids = {p.request.request_id for p in complete}
    for p in (*complete, *after.pending):
        if p.request.request_id not in per_request:
            continue
        rows = per_request[p.request.request_id]
        finished = p.request.request_id in done_ids
        found = "nothing found" if rows == 0 else f"{rows} row(s) deleted"
        note = f"pass {p.passes}: {found}" + (
            "" if finished else "; waiting for rows in flight (see waiting_for)"
        )
        report.requests.append(
            RequestOutcome(
                p.request.request_id,
                subject_hash(p.request.subject, salt),
                p.request.source,
                "complete" if finished else "pending",
                rows,
                [t.name for t in request_targets(p.request, targets, config)],
                note,
                [] if finished else describe_watches(p.watches),
            )
        )
    audit_rows = _audit_rows(report, batch, now)
    if audit_rows:  # a batch of no request touches neither the audit table nor the state
        audit = config.erasure.audit
        tables.ensure_audit_table(audit.dataset, audit.table)
        tables.append_audit(audit.dataset, audit.table, audit_rows)
    if audit_rows or after.requests_read != state.requests_read:
        store.put_bytes(STATE_FILE, _with_concurrent(after, read_state(store), batch).encode())
    return report


def _with_concurrent(
    after: ErasureState, current: ErasureState, batch: Sequence[PendingRequest]
) -> ErasureState:
    """``after``, keeping what another writer recorded since this batch read the state: a
    ``kbqe erase`` runs outside the load pool, so it may overlap an ``erasure`` run. Its
    pending requests are kept and the requests topic's positions only move forward."""
    mine = {p.request.request_id for p in batch}
    theirs = tuple(p for p in current.pending if p.request.request_id not in mine)
    read = dict(current.requests_read)
    for partition, offset in after.requests_read.items():
        read[partition] = max(offset, read.get(partition, offset))
    return replace(after, pending=after.pending + theirs, requests_read=read)


def _arrivals(
    config: PipelineConfig, incoming: Sequence[ErasureRequest], targets: Sequence[Target],
    loaded: Mapping[tuple[str, int], int], watermarks: Watermarks, now: datetime, salt: str,
    report: ErasureReport,
) -> list[PendingRequest]:  # fmt: skip
    out = []
    for request in incoming:
        try:
            reached = request_targets(request, targets, config)
        except ErasureRequestError as error:
            report.requests.append(
                RequestOutcome(
                    request.request_id,
                    subject_hash(request.subject, salt),
                    request.source,
                    "refused",
                    note=str(error),
                )  # fmt: skip
            )
            continue
        topics = feeding_topics(config, reached)
        marks = watermarks(topics) if topics else {}
        watches = watches_at_arrival(marks, loaded)
        out.append(PendingRequest(request, now.isoformat(), watches))
    return out


def _apply(
    config: PipelineConfig, batch: Sequence[PendingRequest], targets: Sequence[Target],
    tables: ErasureTables, store: StagingStore, names: Sequence[str], dry_run: bool,
) -> tuple[dict[str, int], list[TableErasure]]:  # fmt: skip
    """Counts (and unless ``dry_run``, DELETEs) per table; rows per request id."""
    per_request: dict[str, int] = {p.request.request_id: 0 for p in batch}
    reports = []
    manifests_cache: dict[str, Manifest | None] = {}
    for target in targets:
        reaching = [p for p in batch if target in request_targets(p.request, targets, config)]
        if not reaching:
            continue
        restriction = merge_restrictions(
            None
            if p.passes == 0
            else follow_up_restriction(target, _manifests(store, names, p, manifests_cache))
            for p in reaching
        )
        result = TableErasure(target.name)
        reports.append(result)
        if nothing_to_look_at(restriction):
            result.skipped = "no row of the watched offsets was written to it"
            result.partitions = []
            continue
        if restriction is not None:
            result.partitions = list(restriction.values)
        columns = _match_columns(target, tables)
        if not columns:
            result.skipped = "no subject column in this table"
            continue
        subjects = sorted({p.request.subject for p in reaching})
        found: dict[str, int] = defaultdict(int)
        for statement in count_statements(
            target.name, columns, subjects, restriction, target.required_filter_column
        ):
            counted = tables.run(statement)
            result.count_bytes_processed = _add(
                result.count_bytes_processed, counted.bytes_processed
            )
            for value, n in counted.rows:
                found[subject_text(value)] += int(n)
        result.rows_found = sum(found.values())
        for p in reaching:
            per_request[p.request.request_id] += found.get(p.request.subject, 0)
        delete = delete_statement(
            target.name, columns, subjects, restriction, target.required_filter_column
        )
        if delete is None:
            continue
        if dry_run:
            result.bytes_processed = tables.estimate(delete)
            continue
        deleted = tables.run(delete)
        result.rows_deleted = int(deleted.affected_rows or 0)
        result.bytes_processed = deleted.bytes_processed
        log.info(
            "erasure: %s: %d row(s) deleted for %d request(s) (%s)",
            target.name,
            result.rows_deleted,
            len(reaching),
            "whole table" if restriction is None else f"partitions {list(restriction.values)}",
        )
    return per_request, reports


def _manifests(
    store: StagingStore, names: Sequence[str], pending: PendingRequest,
    cache: dict[str, Manifest | None],
) -> dict[str, Manifest | None]:  # fmt: skip
    out = {}
    for name in window_done_files(names, pending.watches):
        if name not in cache:
            try:
                cache[name] = parse_manifest(store.read_bytes(name), name)
            except StagingError:
                cache[name] = None  # deleted since the listing, or unreadable: no restriction
        out[name] = cache[name]
    return out


def _match_columns(target: Target, tables: ErasureTables) -> list[MatchColumn]:
    """The subject columns of ``target`` with their types; a column an exact key names and
    the table lacks is an error (a wildcard's table without it is skipped)."""
    types = {
        path.lower(): kind
        for path, kind in tables.column_types(target.dataset, target.table).items()
    }
    wanted = list(target.columns) + ([target.key_column] if target.key_column else [])
    out = []
    for path in wanted:
        found = types.get(path.lower())
        if found is None:
            if target.explicit and not target.dead_letter:
                raise ErasureError(
                    f"{target.name}: no column {path} (erasure.tables names it): nothing "
                    "would be erased there"
                )
            continue
        kind, mode = found
        if mode == "REPEATED":
            raise ErasureError(
                f"{target.name}: subject column {path} is repeated; name a scalar column or path"
            )
        try:
            out.append(MatchColumn(path, column_type(path, kind, target.name)))
        except ErasureStatementError as error:
            raise ErasureError(str(error)) from error
    return out


def _add(total: int | None, more: int | None) -> int | None:
    if more is None:
        return total
    return (total or 0) + more


def _audit_rows(
    report: ErasureReport, batch: Sequence[PendingRequest], now: datetime
) -> list[dict[str, Any]]:
    passes = {p.request.request_id: p.passes + 1 for p in batch}
    bytes_total = report.bytes_processed
    return [
        {
            "request_id": r.request_id,
            "subject_hash": r.subject_hash,
            "source": r.source,
            "status": r.status,
            "pass_number": passes.get(r.request_id, 0),
            "tables": ",".join(r.tables),
            "rows_deleted": r.rows_deleted,
            "bytes_processed": bytes_total,
            "note": r.note,
            "recorded_at": now,
        }
        for r in report.requests
    ]
