"""Kafka, read without a consumer group: connection settings and clients (``clients.py``),
what the cluster holds (``cluster.py``: topics, partitions, watermarks, first timestamps), the
reader of one offset range (``range_reader.py``) and the native stage kernel's reader of it
(``native_reader.py``).

Part of ``resources/``: may import ``core/`` and nothing above it. No re-exports here: a name
is imported from the module that defines it.
"""
