"""Talking to systems: Kafka, the schema registry, the staging store (GCS or a local
directory), BigQuery and Spark. Each is an interface with real implementations; the
``local`` environment points them at the local stack.

May import core/ (and localstack/, in environment.py only); never the jobs built on them."""
