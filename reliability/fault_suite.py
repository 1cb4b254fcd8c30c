"""The fault-injection suite: does kbqe_dagster stay exactly once when things break?

On the real local stack (Kafka, Apicurio, fake-gcs-server, the BigQuery emulator), with a
topic, staging prefix and datasets of its own, a seeded run does:

- first, on the fresh topic: SIGKILL a stage run in partition 0's first range after every
  other planned range committed, and restart it;
- ``--iterations`` times: produce a batch, SIGKILL a stage run after a random number of avro
  uploads or done files, restart it; SIGKILL a load cycle before a submit, after a submit or
  in the middle of its deletes, restart it; apply done-file retention;
- once each, at seeded places between the iterations: restart the Kafka broker during a stage
  run, stage with the schema registry down, stop fake-gcs-server between two avro uploads,
  let BigQuery refuse every load into one table, race two writers of the same ranges, and
  SIGKILL keyed tables' merge at each of its points (Debezium topics of their own, checked
  against an oracle: reliability/faults_keyed.py);
- once each, on a second topic whose ranges feed a ``delivery: storage_write`` table
  (``orders_live``) and loaded tables at once: SIGKILL a stage run at each Storage Write
  crash point (after the intent, between two appends, after the last append before the done
  file), a zombie stage process on a range whose first writer is between two appends, and a
  BigQuery emulator restart while a stage run is between two appends (it forgets its
  streams): reliability/faults_storage_write.py. The protocol uses COMMITTED streams with
  offsets only, so there is no "between finalize and commit" point (that is PENDING streams');
- once, the same Storage Write faults (each kill point, the zombie, the emulator restart) on
  keyed Debezium topics of their own whose changelogs are ``delivery: storage_write``, each
  followed by ``kbqe run --until-idle`` (roll forward, stage, MERGE) and checked: every change
  in its changelog once by (partition, offset), the current tables and histories equal to
  their oracle;
- then stage and load whatever is left and account for every produced offset in BigQuery
  (the storage_write table's duplicates and losses also on their own).

It prints a summary table and writes it as JSON (``--json``). The exit code is 0 only when
every fault kind was injected at least once and there are no duplicates, no losses, nothing
misplaced and nothing left in staging. ``--long`` is the long run: more iterations by
default, and a GCS outage longer than the upload retry deadline.

    .venv/bin/python reliability/fault_suite.py --seed 7 --iterations 6 \
        --json reliability/results/faults.json
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbqe_dagster.cli.logs import setup_logging  # noqa: E402
from kbqe_dagster.localstack import stack  # noqa: E402
from kbqe_dagster.localstack.endpoints import LocalEndpoints, local_endpoints  # noqa: E402
from reliability import (  # noqa: E402
    faults_keyed,
    faults_load,
    faults_services,
    faults_stage,
    faults_storage_write,
)
from reliability.harness import Suite, SuiteFailure  # noqa: E402
from reliability.report import LOAD_KILLS, STAGE_KILLS, SuiteReport  # noqa: E402
from reliability.verify import account  # noqa: E402
from reliability.world import World  # noqa: E402

log = logging.getLogger("reliability")

MIN_ITERATIONS = len(LOAD_KILLS)  # every load kill point at least once
DEFAULT_ITERATIONS = 4
LONG_ITERATIONS = 20

Step = Callable[[Suite], None]
ONE_OFFS: tuple[tuple[str, Step], ...] = (
    ("kafka restart", faults_services.kafka_restart),
    ("registry down", faults_services.registry_down),
    ("gcs down", faults_services.gcs_down),
    ("bigquery refuses", faults_load.bigquery_refuses),
    ("zombie", faults_stage.zombie),
    ("keyed merge kills", faults_keyed.merge_kills),
    ("storage_write kills", faults_storage_write.kills),
    ("storage_write zombie", faults_storage_write.zombie),
    ("bigquery restart", faults_storage_write.bigquery_restart),
    ("keyed storage_write faults", faults_storage_write.keyed),
)


def _kinds(rnd, all_kinds: tuple[str, ...], count: int) -> list[str]:
    """``count`` kinds: each of ``all_kinds`` once (when count allows), the rest drawn."""
    kinds = list(all_kinds)[:count] + [rnd.choice(all_kinds) for _ in range(count - len(all_kinds))]
    rnd.shuffle(kinds)
    return kinds


def schedule(suite: Suite, iterations: int) -> list[tuple[str, Step]]:
    """The seeded order of every step: the iterations in order, the one-off faults at random
    places between them."""
    rnd = suite.rnd
    stage_kinds = _kinds(rnd, STAGE_KILLS, iterations)
    load_kinds = _kinds(rnd, LOAD_KILLS, iterations)
    steps: list[tuple[str, Step]] = []
    for i, (sk, lk) in enumerate(zip(stage_kinds, load_kinds), start=1):

        def iteration(s: Suite, i=i, sk=sk, lk=lk) -> None:
            faults_stage.stage_kill(s, i, sk)
            faults_load.load_kill(s, i, lk)
            s.world.retention()

        steps.append((f"iteration {i}: {sk} + {lk}", iteration))
    for name, step in ONE_OFFS:
        steps.insert(rnd.randint(1, len(steps)), (name, step))
    # On the fresh topic: a partition's first ranges exist only before its first commit.
    steps.insert(0, ("first range killed", faults_stage.first_range_killed))
    # Last: the zombie stalls across a whole stage pass and load cycle of everything so far.
    steps.append(("late zombie", faults_stage.late_zombie))
    return steps


def run_suite(
    seed: int,
    iterations: int,
    *,
    long: bool = False,
    endpoints: LocalEndpoints | None = None,
    keep: bool = False,
) -> SuiteReport:
    """Run the whole suite on the running local stack; never raises for a failed guarantee
    (the report says what failed), only for a stack it cannot use at all."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(
            f"--iterations must be at least {MIN_ITERATIONS} (one per load kill point)"
        )
    started = time.monotonic()
    report = SuiteReport(seed, iterations, long)
    world = World.create(endpoints or local_endpoints(), seed, datetime.now(UTC).date())
    report.run_id, report.topic = world.run_id, world.topic
    suite = Suite.start(world, report, long)
    try:
        for name, step in schedule(suite, iterations):
            log.info("step: %s", name)
            step(suite)
        log.info("final: stage and load what is left")
        world.stage_pass()
        world.stage_pass(topic=world.sw_topic)
        last = world.load_until_settled()[-1]
        if last.pending_after or last.quarantined_tables:
            raise SuiteFailure(f"final load did not settle: {last.summary()}")
        world.retention()
    except Exception as error:  # noqa: BLE001 - a failed run still reports what it saw
        report.error = f"{type(error).__name__}: {error}"
        log.exception("suite stopped: %s", report.error)
    finally:
        try:
            report.accounting = account(world)
        except Exception as error:  # noqa: BLE001 - the report must still come out
            report.error = (report.error or "") + f" | accounting failed: {error}"
        report.seconds = time.monotonic() - started
        if not keep:
            world.remove()
    return report


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seed", type=int, default=7, help="seed of every random choice (default 7)"
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help=f"stage and load kill iterations (default {DEFAULT_ITERATIONS}, "
        f"--long {LONG_ITERATIONS}; at least {MIN_ITERATIONS})",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long run: more iterations, a GCS outage past the retry deadline",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the summary as JSON here")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the run's topic, staging files and datasets for inspection",
    )
    parser.add_argument(
        "--late-zombie",
        action="store_true",
        help="accepted for old scripts: the late-zombie probe is part of every run",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # -v here means every step of the suite, not every library's debug line.
    setup_logging(
        fmt="%(asctime)s %(levelname)s %(name)s: %(message)s",
        ours_from=logging.INFO if args.verbose else logging.WARNING,
    )
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    if not args.verbose:
        # The injected faults make kbqe log errors on purpose (quarantines, refused commits);
        # the summary says what happened to each. -v shows them.
        logging.getLogger("kbqe_dagster").setLevel(logging.CRITICAL)
    # The coordinator's 16 delete threads overflow urllib3's pool of 10: noise, not a fault.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    iterations = args.iterations or (LONG_ITERATIONS if args.long else DEFAULT_ITERATIONS)
    endpoints = local_endpoints()
    services = stack.build(endpoints=endpoints)
    started = [s for s in services if s.pid() is None]
    stack.up_services(services)  # what was not running is started, and stopped at the end
    try:
        report = run_suite(
            args.seed, iterations, long=args.long, endpoints=endpoints, keep=args.keep
        )
    finally:
        stack.down_services([s for s in started if s.pid() is not None])
    print(report.render())
    if args.json:
        report.write_json(args.json)
        print(f"\nwritten to {args.json}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
