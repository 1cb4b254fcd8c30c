"""A fake :class:`~kbqe_dagster.runner.until_idle.Pipeline` for the loop's unit tests: topics
with a backlog, stage runs that take up to ``per_run`` messages, load jobs that finish after
a number of polls, and switches for every way a run can go wrong. Each topic ``t`` loads
into table ``ds.t``; ``calls`` records what the runner asked, in order (the completeness
evaluation apart: ``evaluations`` holds what was staged and pending at each one).
``max_topics_per_run`` is the pipeline's ``stage_runs.max_topics_per_run`` (1 unless a test
groups topics): a grouped run fails as a whole when one of its topics fails, as a real one
does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.runner.after_load import JobRun
from kbqe_dagster.runner.report import LoadOutcome, StageOutcome, TableCompleteness, TableLoad
from kbqe_dagster.runner.until_idle import Backlog, LoadSide


@dataclass
class Job:
    job_id: str
    table: str
    rows: int
    first: int
    last: int
    topic: str
    polls_left: int


@dataclass
class FakePipeline:
    lags: dict[str, int]
    per_run: int = 1_000
    polls_to_finish: int = 0
    """Polls a load job needs after its submission (0: done when the cycle submits it)."""
    fail_stage: set[str] = field(default_factory=set)
    no_progress: set[str] = field(default_factory=set)
    fail_load: bool = False
    quarantine: set[str] = field(default_factory=set)
    """Tables whose jobs end quarantined instead of loaded."""
    arrivals_per_backlog: int = 0
    """Messages produced on every topic each time the runner looks at a backlog."""
    calls: list[str] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    staged: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    pending: list[Job] = field(default_factory=list)
    quarantined: set[str] = field(default_factory=set)
    runs: int = 0
    max_topics_per_run: int = 1
    completeness_of: Any = None
    """Called with the pipeline at each completeness evaluation: what it returns per table
    (None: no table known). May raise, as an evaluation whose Kafka is unreachable does."""
    evaluations: list[dict[str, int]] = field(default_factory=list)
    """At each completeness evaluation: the offsets staged per topic and the jobs pending."""

    def __post_init__(self) -> None:
        self.config: PipelineConfig = parse_pipeline_config(
            {
                "version": 1,
                "topics": [{"name": t, "event_time": {"fields": ["at"]}} for t in self.lags],
                "allowed_destinations": ["ds.*"],
                "stage_runs": {"max_topics_per_run": self.max_topics_per_run},
            },
            source="fake",
        )
        self.offsets = {t: 0 for t in self.lags}
        self.staged = {t: [] for t in self.lags}

    def _run_id(self, kind: str) -> str:
        self.runs += 1
        return f"{kind}-{self.runs}"

    # --- observations ---------------------------------------------------------------------
    def backlog(self, topic: str) -> Backlog:
        self.calls.append(f"backlog {topic}")
        self.lags[topic] += self.arrivals_per_backlog
        return Backlog(self.lags[topic], {0: self.offsets[topic]})

    def backlogs(self, topics) -> dict[str, Backlog]:
        return {t: self.backlog(t) for t in topics}

    def load_side(self) -> LoadSide:
        return LoadSide(
            pending_jobs=tuple(j.job_id for j in self.pending),
            loadable_files=sum(len(r) for r in self.staged.values()),
            quarantined_tables=tuple(sorted(self.quarantined)),
        )

    def completeness(self) -> dict[str, TableCompleteness]:
        self.evaluations.append({**self.offsets, "pending jobs": len(self.pending)})
        return {} if self.completeness_of is None else self.completeness_of(self)

    # --- jobs -----------------------------------------------------------------------------
    def stage(self, topics: Mapping[str, Backlog]) -> list[StageOutcome]:
        self.calls.append(f"stage {','.join(topics)}")
        run_id = self._run_id("stage")
        failed = [t for t in topics if t in self.fail_stage]
        if failed:
            return [
                StageOutcome(t, run_id, False, "StageRangeFailed: broker gone at offset 7")
                for t in topics
            ]
        return [self._stage_one(t, run_id) for t in topics]

    def _stage_one(self, topic: str, run_id: str) -> StageOutcome:
        if topic in self.no_progress:
            return StageOutcome(topic, run_id, True)
        n = min(self.lags[topic], self.per_run)
        first = self.offsets[topic]
        self.staged[topic].append((first, first + n - 1))
        self.offsets[topic] += n
        self.lags[topic] -= n
        return StageOutcome(
            topic, run_id, True, records=n - 1, messages=n, dead_letters=1, tombstones=1, ranges=1
        )

    def load(self) -> LoadOutcome:
        self.calls.append("load")
        run_id = self._run_id("load")
        if self.fail_load:
            return LoadOutcome(run_id, False, "LoadError: BigQuery unreachable")
        for topic, ranges in self.staged.items():
            for first, last in ranges:
                self.pending.append(
                    Job(
                        f"job-{topic}-{first}",
                        f"ds.{topic}",
                        last - first,
                        first,
                        last,
                        topic,
                        self.polls_to_finish,
                    )
                )
            ranges.clear()
        return LoadOutcome(run_id, True, None, self._finish_jobs())

    def poll(self) -> LoadOutcome:
        self.calls.append("poll")
        for job in self.pending:
            job.polls_left -= 1
        return LoadOutcome(self._run_id("poll"), True, None, self._finish_jobs())

    def _finish_jobs(self) -> dict[str, TableLoad]:
        done = [j for j in self.pending if j.polls_left <= 0]
        self.pending = [j for j in self.pending if j.polls_left > 0]
        tables: dict[str, TableLoad] = {}
        for job in done:
            if job.table in self.quarantine:
                self.quarantined.add(job.table)
                continue
            before = tables.get(job.table, TableLoad(0, (), ()))
            tables[job.table] = TableLoad(
                before.rows + job.rows,
                before.job_ids + (job.job_id,),
                before.offset_ranges + ((job.topic, 0, job.first, job.last),),
            )
        return tables

    def run_job(
        self,
        job_name: str,
        run_config: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> JobRun:
        self.calls.append(f"job {job_name}")
        return JobRun(job_name, self._run_id(job_name), True)
