"""Delivery of staged ranges to BigQuery through the Storage Write API, a sink of the stage
engine (staging/range_sink.py) chosen by the driver like kbqe_dagster/stager_registry.py: a range's records
for ``delivery: storage_write`` tables are appended to application-created streams when the
range commits; every other table's go to the staging area as before. The protocol's pure
pieces are core/protocol/delivery.py; docs/architecture.md ("Storage Write delivery") tells
why every crash point leaves exactly one copy.

May import: ``core/``, ``resources/``, ``staging/``, ``faults``. Imported by whoever builds a
stage context (``defs/staging``, ``runner/``, ``reliability/``); ``staging/`` never imports it.
"""
