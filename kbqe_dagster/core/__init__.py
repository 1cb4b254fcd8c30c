"""Pure decisions of kbqe_dagster: wire format, staging names, offsets, routing, event time,
load selection, retention, the state file and the configuration model.

Nothing in this package talks to a system or imports dagster, google.cloud or pyspark
(kbqe_dagster_tests/test_layers.py enforces it), so every rule here is unit-testable.
"""
