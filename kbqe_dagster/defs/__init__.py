"""Dagster wiring: when things run and with what. One folder per domain (kafka, staging,
bigquery), each with small files; ``resources.py`` chooses the environment once.

May import core/, resources/, staging/, loading/, keyed/, formats/, operations/ and faults.py;
never the runner, the demo or the CLI."""
