"""A Dagster stage run's memory on the local stack: ``stage_job`` as ``kbqe run`` executes it.

bench/bench_stage.py measures the stage job on a bare Python driver. A Dagster stage run's
driver is the run worker: it also holds Dagster, the definitions, their resources' clients
and the instance. This bench measures that run:

1. a fresh topic of 4 partitions with N Confluent-framed Avro messages (bench_stage.py's
   16-field order rows, produced the same way);
2. a pipeline file naming the topic (routing by fields, event time, snappy, one range per
   partition at most: the whole backlog in one run), a local staging directory and a fresh
   Dagster instance (``$DAGSTER_HOME`` with the packaged dagster.yaml, SQLite);
3. one ``stage_job`` run in a child process (bench/_stage_run_child.py: the definitions built
   and the job executed in process, as ``kbqe run --until-idle`` does), whose process tree is
   sampled like bench_stage.py's: the run worker (``driver``: Dagster, the definitions and
   the Spark driver's Python), the Spark JVM, the PySpark daemon and its workers;
4. (``--scale10``) the same at 10×N.

    .venv/bin/python bench/bench_stage_run.py [--messages 1000000] [--scale10]

Prints a table and writes ``bench/results/stage_run.json`` with the machine's facts, the
load average and, per run, peak PSS and RSS per role, the run worker's PSS and module count
after loading the definitions, and the packages it had imported at the end. Budget: the
whole tree ≤ 500 MB of PSS at N and flat at 10×N (issue 42).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
os.environ.setdefault("KBQE_LOCAL_HOME", str(ROOT / ".kbqe-local"))

import bench_stage  # noqa: E402
from _stage_support import TreeSampler, machine_facts  # noqa: E402
from bench_stage import Bench, say  # noqa: E402

from kbqe_dagster.localstack import stack  # noqa: E402
from kbqe_dagster.packaged import data_file  # noqa: E402

BUDGET_MB = 500
ROLES = ("driver", "jvm", "worker", "other", "total")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="N (default 1,000,000)")
    parser.add_argument("--scale10", action="store_true", help="also a run at 10×N")
    parser.add_argument("--json", type=Path, default=BENCH / "results" / "stage_run.json")
    parser.add_argument("--keep", action="store_true", help="keep the topics and staged files")
    return parser.parse_args(argv)


def pipeline_file(directory: Path, topic: str, largest_partition: int) -> Path:
    """bench_stage.py's Avro topic as a pipeline file, its limits raised so that one run
    stages the whole backlog in one range per partition (as bench_stage.py's runs do)."""
    per_range = max(500_000, largest_partition)
    path = directory / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": topic,
                        "routing": {"mode": "fields"},
                        "event_time": {"fields": ["eventTime"]},
                    }
                ],
                "allowed_destinations": ["sales.*"],
                "staging": {
                    "max_messages_per_range": per_range,
                    "max_messages_per_run": 4 * per_range,
                    "file_codec": "snappy",
                },
            }
        )
    )
    return path


def stage_run(bench: Bench, data: dict, exclude: frozenset[int]) -> dict:
    """One stage_job run of ``data``'s topic in a child process, its tree sampled."""
    work = Path(tempfile.mkdtemp(prefix="kbqe-bench-stage-run-"))
    bench.cleanups.append(lambda: shutil.rmtree(work, ignore_errors=True))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copyfile(data_file("dagster.yaml"), home / "dagster.yaml")
    (work / "staging").mkdir()
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(pipeline_file(work, data["topic"], max(data["ends"].values()))),
        "KBQE_STAGING_URL": str(work / "staging"),
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    count = sum(data["ends"].values())
    say(f"stage_job run (Dagster, in process): {count:,} messages")
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, str(BENCH / "_stage_run_child.py"), data["topic"]],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    with TreeSampler(root=child.pid, interval=0.2, exclude=exclude) as sampler:
        out, _ = child.communicate()
    seconds = time.perf_counter() - started
    if child.returncode != 0 or not out.strip():
        raise RuntimeError(f"the stage run's process failed (exit {child.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    if not result["ok"] or result["messages"] != count or result["records"] != count:
        raise RuntimeError(f"stage run did not stage exactly the backlog of {count}: {result}")
    row = {
        "messages": count,
        "seconds_with_start": round(seconds, 2),
        **result,
        **sampler.report(),
    }
    pss = row["peak_pss_mb"]
    say(
        f"  peak PSS {pss.get('total')} MB: run worker {pss.get('driver')}, JVM {pss.get('jvm')}, "
        f"workers {pss.get('worker')}; {seconds:.1f} s with the process's start"
    )
    return row


def print_table(report: dict) -> None:
    print(f"\n{report['machine']['cpu_model']}, {report['machine']['cpus']} cores, "
          f"{report['machine']['memory_gb']} GB; load {report['load_average']}")  # fmt: skip
    head = (
        f"{'stage_job run':>16s} "
        + " ".join(f"{r:>8s}" for r in ("worker*", "JVM", "pyspark", "other", "total"))
        + f" {'defs MB':>8s} {'modules':>8s} {'load':>5s}"
    )
    print(head + "\n" + "-" * len(head))
    for row in report["runs"]:
        pss = row["peak_pss_mb"]
        print(
            f"{row['messages']:>16,d} "
            + " ".join(f"{pss.get(r, 0):>8.1f}" for r in ROLES)
            + f" {row['definitions_loaded']['pss_mb']:>8.1f} {row['modules_at_end']:>8d}"
            f" {row['load_1min']['mean']:>5.2f}"
        )
    print(
        "peak PSS in MB; worker* = the run worker (Dagster + the Spark driver's Python), "
        "pyspark = the daemon and its workers; defs MB = the run worker's PSS once the "
        f"definitions were built; budget {BUDGET_MB} MB total"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    services = stack.build(bench_stage.SERVICES)
    started = [s for s in services if s.pid() is None]
    if started:
        say(f"starting local stack services: {', '.join(s.name for s in started)}")
    stack.up_services(services)
    bench = Bench(
        bench_stage.parse_args(["--messages", str(args.messages)] + ["--keep"] * args.keep)
    )
    report: dict = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "services_started_by_bench": [s.name for s in started],
        "load_average": {"before": [round(x, 2) for x in os.getloadavg()]},
        "runs": [],
    }
    try:
        sizes = [args.messages] + ([10 * args.messages] if args.scale10 else [])
        for size in sizes:
            data = bench.backlog(size)
            report["runs"].append(stage_run(bench, data, bench.service_pids()))
    finally:
        report["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
        bench.close()
        if started:
            stack.down_services([s for s in started if s.pid() is not None])
    print_table(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
