"""Dagster wiring: when things run and with what. One folder per domain (kafka, staging,
bigquery, keyed, completeness, erasure), each with small files and a ``definitions.py`` that
gives the domain's ``Definitions`` for a pipeline (``kbqe_dagster/definitions.py`` merges them);
``resources.py`` chooses the environment once.

May import core/, resources/, staging/, loading/, keyed/, formats/, operations/ and faults.py;
never the runner, the demo or the CLI."""
