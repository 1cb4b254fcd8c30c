"""Dagster wiring: when things run and with what. One folder per domain (kafka, staging,
bigquery), each with small files; ``resources.py`` chooses the environment once."""
