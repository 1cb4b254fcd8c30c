"""Human-readable text for the reports of ``kbqe_dagster/operations/`` (``--json`` prints
``to_json()`` instead). Long lists are shortened here, never in the JSON."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `kbqe --help` must not import fastavro and the config model
    from kbqe_dagster.demo.produce import SampleReport
    from kbqe_dagster.operations.bootstrap import BootstrapReport
    from kbqe_dagster.operations.dead_letter_listing import BytesPreview, DeadLetterReport
    from kbqe_dagster.operations.load_plan import LoadPlanReport
    from kbqe_dagster.operations.load_release import ReleaseReport
    from kbqe_dagster.operations.retention_plan import RetentionReport
    from kbqe_dagster.operations.staging_status import Interval, StagingStatus

MAX_LISTED = 10  # names shown per list before "... and N more"


# --- small formatters ----------------------------------------------------------------------
def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    rows = [tuple(header)] + [tuple(r) for r in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows
    )


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    for unit, span, sub_unit, sub_span in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if s >= span:
            return f"{s // span}{unit} {(s % span) // sub_span}{sub_unit}"
    return f"{s}s"


def intervals(spans: Sequence[Interval], limit: int = 3) -> str:
    if not spans:
        return "-"
    shown = ", ".join(f"{a}..{b}" for a, b in spans[:limit])
    return shown + (f" (+{len(spans) - limit} more)" if len(spans) > limit else "")


def names(items: Sequence[str], indent: str = "  ") -> list[str]:
    lines = [indent + n for n in items[:MAX_LISTED]]
    if len(items) > MAX_LISTED:
        lines.append(f"{indent}... and {len(items) - MAX_LISTED} more (--json lists all)")
    return lines


# --- reports -------------------------------------------------------------------------------
def staging_status(s: StagingStatus) -> str:
    out = [f"staging area {s.staging}"]
    if s.partitions:
        out += [
            "",
            "partitions",
            table(
                (
                    "topic",
                    "partition",
                    "next offset",
                    "committed",
                    "pending files",
                    "pending bytes",
                    "oldest pending",
                    "uncommitted",
                ),
                (
                    (
                        p.topic,
                        str(p.partition),
                        str(p.next_offset),
                        intervals(p.committed_ranges),
                        str(p.pending_files),
                        size(p.pending_bytes),
                        age(p.oldest_pending_age_seconds),
                        str(p.uncommitted_files),
                    )
                    for p in s.partitions
                ),
            ),
        ]
    else:
        out.append("no done files: no partition has committed offsets here")
    notes = []
    for p in s.partitions:
        where = f"{p.topic}[{p.partition}]"
        if p.bootstrap_offset is not None:
            superseded = (
                f"; {p.superseded_done_files} earlier done file(s) superseded"
                if p.superseded_done_files
                else ""
            )
            notes.append(f"{where}: bootstrapped at offset {p.bootstrap_offset}{superseded}")
        if p.holes:
            notes.append(
                f"{where}: uncommitted hole(s) {intervals(p.holes)} — the next stage "
                "run redoes them first"
            )
        notes += [f"{where}: {w}" for w in p.warnings]
        notes += [
            f"{where}: Storage Write intent {i} has no done file — the next stage run "
            "restages exactly its range first"
            for i in p.open_intents
        ]
    out += ["", *notes] if notes else []
    if s.tables:
        out += [
            "",
            "tables",
            table(
                (
                    "table",
                    "loadable files",
                    "loadable bytes",
                    "schema ids",
                    "oldest loadable",
                    "in pending jobs",
                    "quarantined",
                ),
                (
                    (
                        f"{t.dataset}.{t.table}",
                        str(t.loadable_files),
                        size(t.loadable_bytes),
                        ",".join(map(str, t.schema_ids)) or "-",
                        age(t.oldest_loadable_age_seconds),
                        str(t.files_in_pending_jobs),
                        str(t.quarantined_files),
                    )
                    for t in s.tables
                ),
            ),
        ]
    out += [
        "",
        f"load state: {s.pending_jobs} pending job(s), {s.quarantined_files} quarantined file(s)",
    ]
    if s.uncommitted:
        out += [
            "",
            f"avro files without a done file ({len(s.uncommitted)}): in flight, or "
            "leftovers the next stage run deletes",
            *names(s.uncommitted),
        ]
    if s.unrecognized:
        out += [
            "",
            f"not staging file names ({len(s.unrecognized)}), ignored:",
            *names(s.unrecognized),
        ]
    return "\n".join(out)


def load_plan(r: LoadPlanReport) -> str:
    files = sum(len(j.files) for j in r.jobs)
    out = [
        f"next load cycle for {r.staging} (dry run, nothing submitted): "
        f"{len(r.jobs)} job(s), {files} file(s)"
    ]
    for i, job in enumerate(r.jobs, 1):
        out += [
            "",
            f"{i}. {job.dataset}.{job.table}  schema id {job.schema_id}  {len(job.files)} file(s)",
            *names(job.files, "     "),
        ]
    if r.deferred_files:
        out += [
            "",
            f"{r.deferred_files} loadable file(s) wait for a later cycle "
            f"(max_files_per_job {r.max_files_per_job})",
        ]
    if r.pending_jobs:
        out += [
            "",
            f"jobs already in the load state, followed by the poll ({len(r.pending_jobs)}):",
        ]
        out += [
            f"  {j.job_id}  {j.dataset}.{j.table}  {j.status.value}  {len(j.files)} file(s)"
            for j in r.pending_jobs
        ]
    if r.quarantined_files:
        out += [
            "",
            f"quarantined, not loaded until released ({len(r.quarantined_files)}):",
            *names(r.quarantined_files),
        ]
    return "\n".join(out)


def load_release(r: ReleaseReport) -> str:
    table_id = f"{r.dataset}.{r.table}"
    total = len(r.released) + len(r.still_quarantined)
    if r.dry_run:
        out = [
            f"{table_id} in {r.staging}: would release {len(r.released)} of {total} "
            "quarantined file(s) (dry run, nothing changed; --yes releases them)"
        ]
    else:
        out = [
            f"{table_id} in {r.staging}: released {len(r.released)} of {total} quarantined "
            "file(s); the next load cycle plans them again"
        ]
    out += ["", *names([q.file for q in r.released])]
    errors: dict[str, str] = {}
    for q in r.released:
        errors.setdefault(
            q.job_id, f"  {q.job_id} (quarantined {q.quarantined_at.isoformat()}): {q.error}"
        )
    out += ["", "why they were quarantined:", *errors.values()]
    if r.still_quarantined:
        out += ["", f"still quarantined ({len(r.still_quarantined)}):", *names(r.still_quarantined)]
    out += ["", f"quarantine notes stay in {r.notes} (history)"]
    return "\n".join(out)


def retention_plan(r: RetentionReport) -> str:
    out = [
        f"done-file retention for {r.staging} (dry run, nothing deleted): "
        f"delete {len(r.delete)}, keep {len(r.keep)}"
    ]
    if r.delete:
        out += ["", "delete, in this order:", *names(r.delete)]
    if r.keep:
        out += [
            "",
            "keep:",
            table(("done file", "why"), ((k.name, k.reason.value) for k in r.keep[:MAX_LISTED])),
        ]
        if len(r.keep) > MAX_LISTED:
            out.append(f"... and {len(r.keep) - MAX_LISTED} more (--json lists all)")
    if r.unrecognized:
        out += [
            "",
            f"not staging file names ({len(r.unrecognized)}), ignored:",
            *names(r.unrecognized),
        ]
    return "\n".join(out)


def bootstrap(r: BootstrapReport) -> str:
    out = []
    for p in r.partitions:
        where = f"{r.topic}[{p.partition}]"
        if not p.written:
            out.append(f"{where}: already resumes at {p.next_offset}; nothing written")
            continue
        was = (
            "had no done file"
            if p.previous_next_offset is None
            else f"was {p.previous_next_offset}, skips {p.skipped_offsets} offset(s)"
        )
        out.append(f"{where}: resumes at {p.next_offset} ({was}); wrote {p.marker}")
    return "\n".join(out)


def _preview(label: str, p: BytesPreview | None) -> str:
    if p is None:
        return f"    {label}: null"
    more = "..." if p.truncated else ""
    text = f"  text {p.text!r}{more}" if p.text else ""
    return f"    {label}: {p.size} byte(s)  hex {p.hex}{more}{text}"


def dead_letters(r: DeadLetterReport) -> str:
    total = sum(r.counts_by_reason.values())
    out = [
        f"dead letters in {r.staging} ({r.table}): {total} record(s) in "
        f"{len(r.files)} committed file(s) not loaded yet"
    ]
    if r.counts_by_reason:
        out += [
            "",
            table(("reason", "records"), ((k, str(v)) for k, v in r.counts_by_reason.items())),
        ]
    for d in r.records:
        out += [
            "",
            f"{d.topic}[{d.partition}] offset {d.offset}  {d.reason}  "
            f"staged {d.staged_at.isoformat()}",
            f"    error: {d.error}",
            _preview("key", d.key),
            _preview("value", d.value),
        ]
        if d.header_keys:
            out.append(f"    headers: {', '.join(d.header_keys)}")
    if r.truncated:
        out += ["", f"showing {len(r.records)} of {r.matching} (raise --limit, or --json)"]
    return "\n".join(out)


def produce_sample(r: SampleReport) -> str:
    created = "created" if r.created_topic else "existing"
    out = [
        f"produced {r.total} message(s) to {r.topic} ({r.partitions} partitions, {created})",
        "",
        table(("table", "messages"), ((t, str(n)) for t, n in r.per_table.items())),
        "",
        "bad input (each must end in the dead-letter table with this reason):",
        table(("reason", "messages"), ((k, str(n)) for k, n in r.per_reason.items())),
        "",
        "schema ids: " + ", ".join(f"{k}={v}" for k, v in r.schema_ids.items()),
    ]
    return "\n".join(out)
