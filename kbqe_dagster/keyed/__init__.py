"""Keyed destinations (issue 13): Debezium and plain keyed topics land as a changelog, a
current-state table and an SCD type II history.

- ``avro_skip.py``: find where one field's bytes end in an Avro body, without decoding it;
- ``changes.py``: how one writer schema's change messages become flat changelog records
  (the stage side: slices of the body, never a decode and re-encode of the row);
- ``stage.py``: the range stager of keyed topics (tombstones are counted, not staged), built
  on ``staging/stager.py``'s public interface and chosen by kbqe_dagster/stager_registry.py;
- ``table_changes.py``, ``table_stage.py``: topics keyed by their Kafka key (compacted topics):
  the key columns from the Kafka key, tombstones as deletes, any format's values (the table
  stager is put in front of the format's by kbqe_dagster/stager_registry.py);
- ``rows_sql.py``: how a key's row is resolved from its changelog events, as SQL (pure), for
  ``merge_sql.py`` (the idempotent MERGE), ``history_sql.py`` (the SCD type II view) and
  ``check_sql.py`` (the recomputation the check compares the table with);
- ``merge.py``: runs them after the loads, and remembers which load jobs it has merged.

The contract between the halves (column names, the order of a key's events) is
``core/keyed/contract.py``.

May import core/, resources/ and staging/ (the stage side plugs into the stage engine); never
the runner, defs/ or the CLI."""
