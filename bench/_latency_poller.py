"""The poller of bench/bench_latency.py: the table's rows per Kafka partition, asked every
few hundred milliseconds in a thread, each answer kept with its arrival time."""

from __future__ import annotations

import threading
import time

from _latency import PartitionRows, Poll, visible_ends


class TablePoller:
    """Asks the table every ``interval`` s for each partition's row count and offset bounds;
    keeps every answer (its arrival time and rows) and the visible end of each partition.

    By default the polls run throughout, while the path appends, as a user's dashboard would
    (the local stack's emulator answers a query during an append: localstack/
    bqemulator_threads.py). ``pausing`` (``--paused-polls``, for a bqemulator started without
    it, which deadlocks then): :meth:`pause` holds the polls while the path writes (a
    stage-loop round, a load cycle) and :meth:`resume` polls once in the caller's thread
    before letting them go on; a latency is then an upper bound, by at most the rest of the
    round."""

    def __init__(
        self,
        client,
        dataset: str,
        table: str,
        partitions: int,
        interval: float,
        pausing: bool = False,
    ) -> None:
        self.client = client
        self.sql = (
            f"SELECT _kafka_partition AS p, COUNT(*) AS n, MIN(_kafka_offset) AS lo, "
            f"MAX(_kafka_offset) AS hi FROM `{dataset}.{table}` GROUP BY p"
        )
        self.first = dict.fromkeys(range(partitions), 0)  # a fresh topic starts at 0
        self.interval = interval
        self.answers: list[tuple[float, float, tuple[PartitionRows, ...]]] = []
        self.ends: dict[int, int] = {}
        self.errors: list[str] = []
        self.pausing = pausing
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._querying = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="table-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        self._thread.join()

    def pause(self) -> None:
        """No poll from now until :meth:`resume`; returns once a poll in flight has ended."""
        if self.pausing:
            self._running.clear()
            with self._querying:
                pass

    def resume(self, poll_now: bool = False) -> None:
        """Let the polls go on; ``poll_now``: one poll first, in the caller's thread, so a
        path whose rounds run back to back is still seen after every round."""
        if poll_now and self.pausing:
            with self._querying:
                self._poll()
        self._running.set()

    def visible(self) -> int:
        return sum(self.ends.values())

    def _run(self) -> None:
        next_at = time.time()
        while not self._stop.is_set():
            self._running.wait()
            with self._querying:
                if not self._running.is_set():
                    continue  # paused between the wait and the lock
                self._poll()
            next_at = max(next_at + self.interval, time.time())
            self._stop.wait(max(0.0, next_at - time.time()))

    def _poll(self) -> None:
        """One query, its answer kept (a failed one is a missed sample, reported)."""
        from google.api_core.exceptions import NotFound

        asked = time.time()
        try:
            rows = tuple(
                PartitionRows(r["p"], r["n"], r["lo"], r["hi"])
                for r in self.client.query_and_wait(self.sql, api_timeout=30, wait_timeout=30)
            )
        except NotFound:  # the table is created by the first range delivered or loaded
            rows = ()
        except Exception as e:  # noqa: BLE001 - reported with the poller's figures
            self.errors.append(f"{type(e).__name__}: {e}"[:300])
            return
        self.answers.append((asked, time.time(), rows))
        self.ends, _ = visible_ends(rows, self.first, self.ends)

    def polls(self, first: dict[int, int]) -> list[Poll]:
        """Every answer as a :class:`Poll`, its ends computed with the produced first offsets."""
        out, ends = [], {}
        for _, arrived, rows in self.answers:
            ends, gaps = visible_ends(rows, first, ends)
            out.append(Poll(arrived, dict(ends), gaps))
        return out

    def timing(self) -> dict:
        if len(self.answers) < 2:
            return {"polls": len(self.answers)}
        took = [arrived - asked for asked, arrived, _ in self.answers]
        period = (self.answers[-1][1] - self.answers[0][1]) / (len(self.answers) - 1)
        return {
            "polls": len(self.answers),
            "mean_period_s": round(period, 3),
            "mean_query_s": round(sum(took) / len(took), 3),
            "max_query_s": round(max(took), 3),
            "failed_polls": len(self.errors),
            "first_errors": self.errors[:3],
        }
