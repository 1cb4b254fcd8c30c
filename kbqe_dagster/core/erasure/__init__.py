"""Erasure of a data subject's rows (the right to be forgotten): requests and their salted
hash (``requests.py``), the tables a request reaches (``targets.py``), the DELETE and count
statements of a batch (``statements.py``), and when a request is complete (``pending.py``).
docs/operations.md, "Erasure", explains the semantics; resources/bigquery/erasure_tables.py runs the
statements and operations/erasure_batch.py applies a batch."""
