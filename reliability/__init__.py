"""The fault-injection suite: the exactly-once guarantees of kbqe_dagster under SIGKILLs,
service outages, refused loads and a zombie writer, on the real local stack.

Not part of the ``kbqe_dagster`` package: nothing here runs in production. Entry points are
``reliability/fault_suite.py`` (CLI, ``make faults``) and
``kbqe_dagster_tests/reliability/test_fault_suite.py`` (a bounded run in the test suite).
"""
