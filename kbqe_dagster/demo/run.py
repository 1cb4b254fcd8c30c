"""``kbqe demo``: the main job end to end on the local stack, as the README promises.

Check that an earlier run left nothing the demo cannot run on (``demo/preflight.py``),
start the stack, put sample events on ``com.acme.events``, run the stage job and the load
job through Dagster (so the runs, materializations and checks are in the local instance),
print the rows per BigQuery table, then optionally hand over to ``dagster dev``.
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

REPO = Path(__file__).resolve().parents[2]


def produce_demo_events(count: int) -> dict[str, int]:
    """Produce ``count`` good events plus one of each bad kind on the local stack's demo topic
    (as ``kbqe produce-sample`` does, with a fresh seed per run); returns the messages per
    table and per bad-input reason (``bad:<reason>``)."""
    from kbqe_dagster.demo.samples import DEMO_TOPIC
    from kbqe_dagster.localstack.endpoints import local_endpoints
    from kbqe_dagster.demo.produce import produce_sample

    ends = local_endpoints()
    report = produce_sample(
        ends.kafka_bootstrap, ends.registry_url, topic=DEMO_TOPIC, count=count,
        seed=int(time.time()),
    )
    return {**report.per_table, **{f"bad:{r}": n for r, n in report.per_reason.items()}}


PROGRESS_SECONDS = 10.0


def run_demo(count: int = 2_000, then_dagster_dev: bool = False,
             dagster_logging: dict | None = None, verbose: bool = False) -> int:
    """``dagster_logging``: the ``loggers`` run config of the in-process runs (their console
    logger's level; the CLI passes a quiet one unless ``-v``). ``verbose``: keep Spark's
    driver log lines."""
    from kbqe_dagster.localstack import stack
    from kbqe_dagster.resources.environment import local_dagster_home

    os.environ.setdefault("KBQE_ENV", "local")
    _stop_on(check_stack(lambda: [ServiceFact(s.name, s.pid, s.running) for s in stack.status()]))
    print("1/4 starting the local stack (first run downloads Kafka and Apicurio) ...", flush=True)
    stack.up()
    _stop_on(check_staging(_local_load_state))
    print(f"2/4 producing {count} sample events (+ one of every bad-input kind) ...", flush=True)
    for name, n in sorted(produce_demo_events(count).items()):
        print(f"      {name}: {n}")

    os.environ["DAGSTER_HOME"] = str(local_dagster_home())
    if not verbose:
        from kbqe_dagster.demo.spark_console import quiet_spark_driver
        from kbqe_dagster.localstack.base import stack_home

        quiet_spark_driver(stack_home() / "spark-conf")
    import dagster as dg

    from kbqe_dagster.definitions import build_definitions
    from kbqe_dagster.defs.staging.assets import TOPIC_TAG
    from kbqe_dagster.defs.staging.jobs import stage_run_config
    from kbqe_dagster.demo.samples import DEMO_TOPIC

    defs = build_definitions()
    instance = dg.DagsterInstance.get()
    print("3/4 stage job (Spark) ...", flush=True)
    store = defs.resources["staging"].store()
    with every(PROGRESS_SECONDS, lambda s: _committed(store, DEMO_TOPIC, s)):
        staged = defs.resolve_job_def("stage_job").execute_in_process(
            run_config={**stage_run_config(DEMO_TOPIC), **(dagster_logging or {})},
            instance=instance, tags={TOPIC_TAG: DEMO_TOPIC},
        )
    if not staged.success:
        raise KbqeError("the stage run failed; see `dagster dev` → Runs for its logs")
    for event in staged.get_asset_materialization_events():
        meta = event.materialization.metadata
        print(f"      staged {meta['dagster/row_count'].value} record(s), "
              f"{meta['dead_letters'].value} dead letter(s) in {meta['files_written'].value} file(s)")

    print("4/4 load job (BigQuery emulator) ...", flush=True)
    from kbqe_dagster.demo.load import load_and_report

    load_and_report(defs, instance, dagster_logging or {})
    if then_dagster_dev:
        return exec_dagster_dev()
    print("the runs, assets and checks are in the Dagster UI: `kbqe dev`, then "
          "http://127.0.0.1:3000 (`-v` shows every log line)")
    return 0


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
    """Replace this process with ``dagster dev`` on the local instance (Ctrl-C to stop)."""
    from kbqe_dagster.resources.environment import local_dagster_home

    home = local_dagster_home()
    env = {**os.environ, "DAGSTER_HOME": str(home), "KBQE_ENV": os.environ.get("KBQE_ENV", "local")}
    dagster = str(Path(sys.executable).parent / "dagster")
    print(f"Dagster UI on http://127.0.0.1:{port} (Ctrl-C stops it; `make stack-down` stops the stack)",
          flush=True)
    os.chdir(REPO)
    os.execve(dagster, [dagster, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)], env)
    return 0  # not reached
