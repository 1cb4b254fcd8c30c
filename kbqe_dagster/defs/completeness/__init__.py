"""Completeness in Dagster: the ``day_complete`` check per DAY partition of each table asset,
and the sensor that evaluates it after loads (core/completeness/decision.py decides)."""
