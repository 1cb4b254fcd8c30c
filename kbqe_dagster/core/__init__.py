"""Pure decisions of kbqe_dagster, in sub-packages by concern. Nothing here talks to a system
or imports dagster, google.cloud, pyspark, confluent_kafka or requests, and nothing here
imports a package outside ``core/`` (kbqe_dagster_tests/test_layers.py enforces both), so
every rule is unit-testable.

The rooms, lowest first (each may import only the rooms listed before it, and this top):

- this top: ``errors.py`` (the one error hierarchy), ``reasons.py`` (why a message is bad
  input), ``config_reader.py`` (how a raw configuration mapping is checked),
  ``client_properties.py`` (client properties named by environment variables, and which are
  secret); they import nothing of the package but each other.
- ``formats/``: how a topic's values become Avro record bodies.
- ``protocol/``: the staging protocol: file names, offsets, the range commit, retention.
- ``record/``: one message: framing, routing, event time, enrichment, partitioning, dead
  letters (imports formats, protocol).
- ``load/``: the BigQuery side: selection, the load state, pending files, checks, notices
  (imports protocol).
- ``transforms/``: per-record transforms and one message into several tables (imports
  formats, record).
- ``keyed/``: keyed tables (imports formats, load).
- ``completeness/``: when a day of a table is complete (imports record).
- ``config/``: the pipeline file (imports every room above).
- ``stage_runs/``: when a topic's stage run is due and which topics share one (imports
  config, protocol).
- ``erasure/``: a data subject's rows erased across tables: requests, targets, statements,
  when a request is complete (imports config, protocol, record, keyed).

No ``__init__.py`` re-exports: a name is imported from the module that defines it.
"""
