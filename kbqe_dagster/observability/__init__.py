"""Prometheus metrics and health of the pipeline: ``kbqe metrics serve`` and ``kbqe health``.

Why a separate long-lived exporter whose values are computed at scrape time: the work is
done by processes that do not live long enough to be scraped. Stage tasks run in Spark
executors for the length of one offset range; load ops run in Dagster run processes for one
cycle. Counters kept in their memory would vanish with them (and a push gateway would only
move the problem: per-run series, no reset semantics, one more service). Everything that
matters is already written down durably, so the exporter reads it back:

- the **Dagster event log** (``DagsterInstance``): every stage run's materialization of
  ``staging`` (messages, records, bytes per dataset, files, orphans deleted, dead letters and
  skips per reason, run seconds), every succeeded load job's materializations of its table
  (job id, attempts, files, rows) and retention's observations (done files deleted). Read
  incrementally, folded into counters and histograms (``event_log.py``, ``event_totals.py``);
- the **staging area** listing plus the **load state file**: pending files, bytes and
  oldest age per table, load jobs by status, quarantined tables (``staging_view.py``); the
  load counters combine both records of load jobs (``load_counts.py``);
- **Kafka** watermarks against the **done files**: lag per topic-partition (``lag.py``).

Each source sits behind a short cache with a single refresh in flight (``cache.py``), so a
burst of scrapes costs one round of requests, and a scrape waits a bounded time — an
unreachable system shows as ``kbqe_exporter_source_up{source} 0``, not as a hung scrape.
The collector (``collector.py``, metric definitions in ``families.py``) runs at scrape time;
nothing is pushed or kept in the processes that do the work.

Health (``health.py``): reachability of Kafka, the registry, the staging area and BigQuery,
no quarantined table, staging not older than a threshold; each check bounded by 3 s.
Secrets of the connections never appear in any answer or log line (``redact.py``).

The exporter runs next to ``dagster-daemon``, with the same environment (``KBQE_ENV``,
``DAGSTER_HOME``, the connection variables); see ``docs/operations.md``.

May import core/, resources/, staging/ and operations/; never defs/ or definitions.py."""
