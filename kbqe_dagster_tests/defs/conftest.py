"""The load tests' staging directory, fake BigQuery client and clock, for the Dagster wiring
tests of the load side."""

from kbqe_dagster_tests.loading.conftest import bq, clock, make_coordinator, store  # noqa: F401
