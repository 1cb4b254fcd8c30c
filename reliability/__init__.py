"""The fault-injection suite: the exactly-once guarantees of kbqe_dagster under SIGKILLs,
service outages, refused loads and a zombie writer, on the real local stack.

Not part of the ``kbqe_dagster`` package: nothing here runs in production. Entry points are
``reliability/fault_suite.py`` (CLI, ``make faults``) and
``kbqe_dagster_tests/reliability/test_fault_suite.py`` (a bounded run in the test suite).
Also the Postgres oracle of Debezium tables (``postgres_oracle.py``: a source table of every
mapped type, its changes, the comparison with ``D.T``), used by
``kbqe_dagster_tests/keyed/test_debezium_postgres_oracle.py`` and, under the Dagster daemon,
by ``reliability/debezium_daemon.py``; and a compacted topic under the Dagster daemon, compared
with the topic read as a table after the broker compacted it (``reliability/compacted_daemon.py``).
"""
