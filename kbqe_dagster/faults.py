"""Fault injection at the commit points of the stage and load steps, for the exactly-once
tests and the fault-injection suite (``reliability/``): ``KBQE_CRASH_AT=<point>:<n>`` kills
the process with SIGKILL the n-th time it reaches ``crash_point(<point>)``.

Points (where a real crash hurts most):
- ``avro_uploaded`` (stage): after each avro file of a range is uploaded, before its commit;
- ``done_created`` (stage): after each done file is created, between the done files of a range;
- ``load_before_submit`` (load): a job is recorded in the state file, BigQuery has not seen it;
- ``load_after_submit`` (load): BigQuery accepted the job, the state file does not say so yet;
- ``avro_deleted`` (load): after each loaded avro file is deleted, before the job is marked
  succeeded (a crash in the middle of a job's deletes);
- ``storage_write_intent`` (stage, Storage Write delivery): after a table's intent is created,
  before its first append;
- ``storage_write_appended`` (stage): after each AppendRows request answered (between two
  appends, and after the last one);
- ``storage_write_delivered`` (stage): after the last append of every table of a range, before
  its done files (the done files' own point is ``done_created``).

Unset in production. It is read once per file or job, never per message, so it costs nothing.
SIGKILL, not an exception: no ``finally`` runs, exactly like a lost machine.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

CRASH_ENV = "KBQE_CRASH_AT"

_counts: Counter[str] = Counter()
_lock = threading.Lock()  # the load step deletes from a thread pool


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL when ``$KBQE_CRASH_AT`` is ``name:n`` and this is the
    n-th time (default 1) the process reaches ``name``."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    with _lock:
        _counts[name] += 1
        reached = _counts[name] >= int(nth or 1)
    if reached:
        os.kill(os.getpid(), signal.SIGKILL)
