"""The Dagster stage run that bench/bench_stage_run.py measures, in a process of its own.

It runs ``stage_job`` for one topic the way ``kbqe run --until-idle`` does
(``runner/in_process.py``: the definitions built from ``KBQE_PIPELINE_CONFIG``, the run
recorded in ``$DAGSTER_HOME``'s instance, executed in this process), so this process is the
run worker: what it holds besides the Spark JVM and the Python workers is Dagster, the
definitions and the instance. (A run launched by the daemon, or by ``dagster job execute``,
uses the job's own executor, Dagster's default multiprocess one: each step in a process of its
own, which loads the definitions again; docs/architecture.md, "Memory of a Dagster stage run".)

Prints one JSON line: the run's outcome, the process's PSS and module count after loading
the definitions (before the run) and the top-level packages it had imported at the end.

    python bench/_stage_run_child.py TOPIC
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent)]


def pss_mb() -> float:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main(topic: str) -> None:
    started = time.perf_counter()
    from kbqe_dagster.definitions import build_definitions
    from kbqe_dagster.defs.staging.jobs import stage_run_config
    from kbqe_dagster.runner.in_process import dagster_instance, execute_job

    defs = build_definitions()
    loaded = {
        "pss_mb": pss_mb(),
        "modules": len(sys.modules),
        "seconds": round(time.perf_counter() - started, 2),
    }
    with dagster_instance() as instance:
        run = execute_job(defs, instance, "stage_job", stage_run_config(topic))
    staged = next((md for key, md in run.materializations if key == ("staging",)), {})
    packages = Counter(name.split(".")[0] for name in sys.modules)
    print(
        json.dumps(
            {
                "ok": run.ok,
                "error": run.error,
                "messages": staged.get("messages", 0),
                "records": staged.get("dagster/row_count", 0),
                "dead_letters": staged.get("dead_letters", 0),
                "definitions_loaded": loaded,
                "modules_at_end": len(sys.modules),
                "packages_at_end": dict(packages.most_common(25)),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1])
