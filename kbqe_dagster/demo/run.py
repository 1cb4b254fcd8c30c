"""``kbqe demo``: the main job end to end on the local stack, as the README promises.

Check that an earlier run left nothing the demo cannot run on (``demo/preflight.py``),
start the stack, put sample events on ``com.acme.events``, run the stage job and the load
job through Dagster (so the runs, materializations and checks are in the local instance),
print the rows per BigQuery table, then optionally hand over to ``dagster dev``.

One table, ``acme_web.clicks``, is delivered through the BigQuery Storage Write API
(``examples/pipeline.yaml``): its rows arrive during the stage run, the others after the load
job. The demo prints how many seconds after the last message produced each kind was
queryable, and what the clicks cost at list price (demo/freshness.py).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.demo.preflight import (
    DemoPreflightError,
    Problem,
    ServiceFact,
    check_stack,
    check_staging,
)
from kbqe_dagster.demo.progress import every

log = logging.getLogger(__name__)


def produce_demo_events(count: int, clicks: int = 0) -> dict[str, int]:
    """Produce ``count`` good events plus one of each bad kind on the local stack's demo topic
    (as ``kbqe produce-sample`` does, with a fresh seed per run), then ``clicks`` clicks (the
    Storage Write table's); returns the messages per table and per bad-input reason
    (``bad:<reason>``)."""
    from kbqe_dagster.demo.produce import produce_sample
    from kbqe_dagster.demo.samples import DEMO_TOPIC
    from kbqe_dagster.localstack.endpoints import local_endpoints

    ends = local_endpoints()
    report = produce_sample(
        ends.kafka_bootstrap,
        ends.registry_url,
        topic=DEMO_TOPIC,
        count=count,
        seed=int(time.time()),
        clicks=clicks,
    )
    return {**report.per_table, **{f"bad:{r}": n for r, n in report.per_reason.items()}}


PROGRESS_SECONDS = 10.0
EVENTS_PER_CLICK = 4
"""One click (the Storage Write table's) per this many sample events."""


def run_demo(
    count: int = 2_000,
    then_dagster_dev: bool = False,
    dagster_logging: dict | None = None,
    verbose: bool = False,
) -> int:
    """``dagster_logging``: the ``loggers`` run config of the in-process runs (their console
    logger's level; the CLI passes a quiet one unless ``-v``). ``verbose``: keep Spark's
    driver log lines."""
    from kbqe_dagster.localstack import stack
    from kbqe_dagster.resources.environment import local_dagster_home

    os.environ.setdefault("KBQE_ENV", "local")
    # The demo's services only: an on-demand Postgres or Connect left running is not its
    # business (a broken one must not stop the demo).
    demo_services = [s.name for s in stack.build()]
    _stop_on(
        check_stack(
            lambda: [ServiceFact(s.name, s.pid, s.running) for s in stack.status(demo_services)]
        )
    )
    print("1/4 starting the local stack (first run downloads Kafka and Apicurio) ...", flush=True)
    stack.up()
    _stop_on(check_staging(_local_load_state))
    clicks = count // EVENTS_PER_CLICK
    print(
        f"2/4 producing {count} sample events (+ one of every bad-input kind) and {clicks} "
        "clicks ...",
        flush=True,
    )
    produced = produce_demo_events(count, clicks)
    produced_at = time.monotonic()
    for name, n in sorted(produced.items()):
        print(f"      {name}: {n}")
    from kbqe_dagster.demo.raw_archive import AUDIT_TOPIC, audit_line, produce_audit_events
    from kbqe_dagster.localstack.endpoints import local_endpoints

    audit = produce_audit_events(local_endpoints().kafka_bootstrap, int(time.time()))
    print(f"      {AUDIT_TOPIC} (format: raw): {audit} message(s) no decoder could stage")

    os.environ["DAGSTER_HOME"] = str(local_dagster_home())
    if not verbose:
        from kbqe_dagster.demo.spark_console import quiet_spark_driver
        from kbqe_dagster.localstack.base import stack_home

        quiet_spark_driver(stack_home() / "spark-conf")
    import dagster as dg

    from kbqe_dagster.core.stage_runs.groups import join_topics
    from kbqe_dagster.definitions import build_definitions
    from kbqe_dagster.defs.keys import STAGING_KEY, TOPICS_TAG
    from kbqe_dagster.defs.staging.jobs import stage_group_run_config
    from kbqe_dagster.demo.freshness import DemoFreshness
    from kbqe_dagster.demo.samples import DEMO_TOPIC

    defs = build_definitions()
    instance = dg.DagsterInstance.get()
    print("3/4 stage job (Spark) ...", flush=True)
    store = defs.resources["staging"].store()
    config = defs.resources["pipeline"].load()
    fast, slow = _by_delivery(config, produced)
    watches = _watch(defs.resources["bigquery"], fast, produced)
    with every(PROGRESS_SECONDS, lambda s: _committed(store, DEMO_TOPIC, s)):
        staged = defs.resolve_job_def("stage_job").execute_in_process(
            # The demo topic and the raw archive's in one run: one Spark start, not two.
            run_config={
                **stage_group_run_config([DEMO_TOPIC, AUDIT_TOPIC]),
                **(dagster_logging or {}),
            },
            instance=instance,
            tags={TOPICS_TAG: join_topics([DEMO_TOPIC, AUDIT_TOPIC])},
        )
    seen = [w.finish() for w in watches]
    if not staged.success:
        raise KbqeError("the stage run failed; see `dagster dev` → Runs for its logs")
    appended: dict = {}
    for event in staged.get_asset_materialization_events():
        if event.materialization.asset_key != STAGING_KEY:
            continue  # a storage_write table's rows, per day: summed in the staging one
        meta = event.materialization.metadata
        print(
            f"      staged {meta['dagster/row_count'].value} record(s), "
            f"{meta['dead_letters'].value} dead letter(s) in {meta['files_written'].value} file(s)"
        )
        appended = meta["storage_write_by_table"].value
    for table, a in sorted(appended.items()):
        print(f"      appended {a['rows']} row(s) to {table} through the Storage Write API")

    print("4/4 load job (BigQuery emulator) ...", flush=True)
    from kbqe_dagster.demo.load import load_and_report

    loaded = load_and_report(defs, instance, dagster_logging or {})
    freshness = DemoFreshness(
        produced_at,
        fast,
        None if None in seen or not seen else max(seen),
        slow,
        loaded.at,
        appended,
        loaded.bytes_loaded,
        config.load.cadence.total_seconds(),
    )
    print(audit_line(defs.resources["bigquery"].client()))
    for line in freshness.lines():
        print(line)
    if then_dagster_dev:
        return exec_dagster_dev()
    print(
        "the runs, assets and checks are in the Dagster UI: `kbqe dev`, then "
        "http://127.0.0.1:3000 (`-v` shows every log line)"
    )
    return 0


def _by_delivery(config, produced: dict[str, int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tables the demo produced for, ``storage_write`` ones first, then the load ones."""
    from kbqe_dagster.core.record.partitioning import Delivery
    from kbqe_dagster.demo.samples import DEMO_TOPIC

    tables = sorted(t for t, n in produced.items() if n and not t.startswith("bad:"))
    fast = tuple(
        t for t in tables if config.delivery(*t.split("."), DEMO_TOPIC) is Delivery.STORAGE_WRITE
    )
    return fast, tuple(t for t in tables if t not in fast)


def _watch(bigquery, tables: tuple[str, ...], produced: dict[str, int]) -> list:
    """A watcher per storage_write table: its rows now plus the ones just produced."""
    from kbqe_dagster.demo.freshness import VisibilityWatch, count_rows

    watches = []
    for table in tables:
        client = bigquery.client()  # one per thread: the watcher's own
        before = count_rows(client, table)
        watches.append(
            VisibilityWatch(
                lambda c=client, t=table: count_rows(c, t), before + produced[table]
            ).start()
        )
    return watches


def _local_load_state():
    from kbqe_dagster.defs.resources import resources_for_environment
    from kbqe_dagster.loading.state_file import StateFile

    return StateFile(resources_for_environment()["staging"].store()).read()


def _stop_on(problems: list[Problem]) -> None:
    """Say every problem with its fix, then stop before any work is done."""
    if problems:
        for problem in problems:
            print(f"kbqe demo: {problem}", file=sys.stderr)
        raise DemoPreflightError(problems)


def _committed(store, topic: str, elapsed: float) -> str:
    done = sum(1 for f in store.list(f"{topic}.") if f.name.endswith(".done"))
    return f"      ... {elapsed:.0f}s: {done} done file(s) of {topic} in the staging area"


def exec_dagster_dev(port: int = 3000) -> int:
    """Replace this process with ``dg dev`` (``dagster dev`` without dagster-dg-cli) on
    ``$DAGSTER_HOME`` when it is set, as ``kbqe run`` does (a user's own instance: PostgreSQL,
    another run launcher), else on the local instance (Ctrl-C to stop)."""
    from kbqe_dagster.resources.environment import local_dagster_home

    home = (
        Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else local_dagster_home()
    )
    env = {**os.environ, "DAGSTER_HOME": str(home), "KBQE_ENV": os.environ.get("KBQE_ENV", "local")}
    if sys.prefix != sys.base_prefix:
        # The interpreter's virtual environment, also when it was not activated (`.venv/bin/
        # kbqe dev`): dg otherwise warns that "the active virtual environment does not match".
        env["VIRTUAL_ENV"] = sys.prefix
    print(
        f"Dagster UI on http://127.0.0.1:{port} (Ctrl-C stops it; `kbqe stack down` stops the stack)",
        flush=True,
    )
    argv = dagster_dev_command(port)
    os.execve(argv[0], argv, env)
    return 0  # not reached


def dagster_dev_command(port: int) -> list[str]:
    """The command ``kbqe dev`` becomes, its working directory made current.

    ``dg dev`` (dagster-dg-cli, the dev extra) where it is installed: in a checkout, the
    repository is the ``dg`` project (pyproject.toml's ``[tool.dg]``) and the UI starts from
    its root as ever; an installed wheel has no project, so the packaged workspace.yaml names
    the code location, where the user is. Both run Dagster's own ``dev`` on ``$DAGSTER_HOME``,
    our dagster.yaml (run queue, tag limits, the ``bigquery_load`` pool). Without dg, the same
    through ``dagster dev`` (which calls itself superseded by ``dg dev``)."""
    from kbqe_dagster.packaged import checkout_root, data_file

    bin_dir = Path(sys.executable).parent
    bind = ["-h", "127.0.0.1", "-p", str(port)]
    checkout = checkout_root()
    if checkout is not None:
        os.chdir(checkout)
    dg = bin_dir / "dg"
    if dg.is_file():
        target = [] if checkout is not None else ["-w", str(data_file("workspace.yaml"))]
        return [str(dg), "dev", *target, *bind]
    return [str(bin_dir / "dagster"), "dev", "-w", str(data_file("workspace.yaml")), *bind]
