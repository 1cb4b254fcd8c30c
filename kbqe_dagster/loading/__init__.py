"""The load coordinator: plan BigQuery load jobs from the staging area, record them in the
state file before submitting, poll them, delete loaded avro files, retry or quarantine
failures, and apply done-file retention (DESIGN.md §3–4). Decisions come from ``core/``;
this package does the I/O in the order that keeps every crash safe.

May import core/, resources/ and faults.py; never the stage side, defs/ or the runner."""
