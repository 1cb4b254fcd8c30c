"""Faults of the load side: the coordinator SIGKILLed at its three crash points, and a
BigQuery that refuses every load into one table.

The kill points (``kbqe_dagster/faults.py``): ``load_before_submit`` — jobs recorded in the
state file, BigQuery not told; ``load_after_submit`` — BigQuery has the job, the state does
not say so; ``avro_deleted`` — a job's files partly deleted, the job not marked succeeded. A
restarted coordinator must finish each job exactly once (resubmit under the recorded id, or
find the job done and finish deleting).
"""

from __future__ import annotations

import time
from typing import Any

from kbqe_dagster.core.load.state import STATE_FILE, decode_state
from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.operations.load_release import release
from reliability import children
from reliability.harness import SIGKILLED, Suite, SuiteFailure
from reliability.report import (
    BIGQUERY_REFUSES,
    LOAD_KILL_AFTER_SUBMIT,
    LOAD_KILL_BEFORE_SUBMIT,
    LOAD_KILL_MID_DELETE,
)
from reliability.world import MAX_RETRIES

POINTS = {
    LOAD_KILL_BEFORE_SUBMIT: "load_before_submit",
    LOAD_KILL_AFTER_SUBMIT: "load_after_submit",
    LOAD_KILL_MID_DELETE: "avro_deleted",
}


def _loadable(suite: Suite) -> tuple[int, int]:
    """(avro files with their done file, distinct (table, schema id) groups among them)."""
    listing = parse_listing(f.name for f in suite.world.store().list())
    done_keys = {d.key for d in listing.done}
    files = [a for a in listing.avro if a.key in done_keys and a.key.topic == suite.world.topic]
    groups = {(a.key.dataset, a.key.table, a.key.schema_id) for a in files}
    return len(files), len(groups)


def load_kill(suite: Suite, iteration: int, kind: str) -> None:
    """SIGKILL a load cycle at ``kind``'s point after a random number of passes, restart."""
    started = time.monotonic()
    files, jobs = _loadable(suite)
    if files < 2:
        raise SuiteFailure(f"{kind}: only {files} loadable file(s); nothing to interrupt")
    top = files - 1 if kind == LOAD_KILL_MID_DELETE else jobs
    spec = f"{POINTS[kind]}:{suite.rnd.randint(1, max(1, top))}"
    world = suite.world
    code = suite.child(children.load_cycle, world.staging, world.config, world.endpoints, spec)
    if code not in (0, SIGKILLED):
        raise SuiteFailure(f"load cycle with KBQE_CRASH_AT={spec} exited {code}")
    left, _ = _loadable(suite)
    reports = world.load_until_settled()
    first = reports[0]
    retention = world.retention()
    detail = (
        f"KBQE_CRASH_AT={spec} of {files} file(s) in {jobs} job(s); "
        f"{left} file(s) left; restart resubmitted {len(first.resubmitted)}, "
        f"completed {len(first.completed)} job(s) in {len(reports)} cycle(s); "
        f"retention deleted {len(retention.deleted)} done file(s)"
    )
    if code != SIGKILLED:
        detail = f"cycle finished before the crash point ({detail})"
    if reports[-1].pending_after or reports[-1].quarantined:
        raise SuiteFailure(f"{kind}: the restarted coordinator did not settle: {detail}")
    suite.record(kind, iteration, code == SIGKILLED, detail, started)


class RefusingClient:
    """A BigQuery client that answers 400 Bad Request to every load into one table and
    passes everything else to the real client. On the local stack a load into an existing
    table ends in a by-name INSERT (resources/bigquery/emulator.py): that is refused too."""

    def __init__(self, client: Any, dataset: str, table: str) -> None:
        self._client = client
        self._target = f".{dataset}.{table}"
        self._insert = f"INSERT INTO `{dataset}.{table}` "
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def load_table_from_uri(self, source_uris, destination, **kwargs):
        from google.api_core.exceptions import BadRequest

        if str(destination).endswith(self._target):
            self.refused.append(kwargs.get("job_id") or "?")
            raise BadRequest(f"fault injection: loads into {destination} are refused")
        return self._client.load_table_from_uri(source_uris, destination, **kwargs)

    def query(self, sql: str, *args: Any, **kwargs: Any):
        from google.api_core.exceptions import BadRequest

        if sql.startswith(self._insert):
            self.refused.append(kwargs.get("job_id") or "?")
            raise BadRequest(f"fault injection: loads into {self._target[1:]} are refused")
        return self._client.query(sql, *args, **kwargs)


def bigquery_refuses(suite: Suite) -> None:
    """Loads into one table are refused: retried under new ids, then quarantined, while the
    other tables load; released by the operator command, the files then load once."""
    started = time.monotonic()
    world = suite.world
    suite.produce(150, 250, BIGQUERY_REFUSES)
    world.stage_pass()
    dataset, table = suite.rnd.choice(world.loaded_tables)
    loads = world.bigquery()
    refusing = RefusingClient(loads.client, dataset, table)
    loads.client = refusing
    reports = world.load_until_settled(loads)
    state = decode_state(world.store().read_bytes(STATE_FILE))
    quarantined = {(q.dataset, q.table) for q in state.quarantined}
    loaded_tables = {c.table_id for r in reports for c in r.completed}
    retried = [r for report in reports for r in report.retried]
    jobs = {q.job_id for q in state.quarantined}
    if quarantined != {(dataset, table)}:
        raise SuiteFailure(f"refused {dataset}.{table}: quarantined tables are {quarantined}")
    others = {t for t in (*world.loaded_tables, world.dead_letter_table) if t != (dataset, table)}
    if not others <= loaded_tables:
        raise SuiteFailure(
            f"refused {dataset}.{table}: the other tables did not all load "
            f"(loaded {sorted(loaded_tables)})"
        )
    if (
        len(refusing.refused) != len(jobs) * (1 + MAX_RETRIES)
        or len(retried) != len(jobs) * MAX_RETRIES
    ):
        raise SuiteFailure(
            f"refused {dataset}.{table}: {len(refusing.refused)} refusals and "
            f"{len(retried)} retries for {len(jobs)} quarantined job(s), expected "
            f"{1 + MAX_RETRIES} refusals and {MAX_RETRIES} retry per job"
        )
    released = release(world.store(), f"{dataset}.{table}", dry_run=False)
    after = world.load_until_settled()
    if after[-1].quarantined_tables or after[-1].pending_after:
        raise SuiteFailure(f"released {dataset}.{table} did not load: {after[-1].summary()}")
    suite.record(
        BIGQUERY_REFUSES,
        None,
        True,
        f"{dataset}.{table}: {len(refusing.refused)} refused submission(s), "
        f"{len(retried)} retr(y/ies) under new ids, {len(jobs)} job(s) quarantined "
        f"while {len(others)} other table(s) loaded; {len(released.released)} file(s) "
        f"released and loaded",
        started,
    )
